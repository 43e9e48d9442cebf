package debpkg

import "testing"

func TestDebVersion(t *testing.T) {
	for in, want := range map[string]string{
		"v1.2.3":            "1.2.3",
		"v1.2.3-4-gabcdef0": "1.2.3+4+gabcdef0",
		"0adb712-dirty":     "0.0~git.0adb712.dirty",
		"":                  "0.0~git.devel",
	} {
		if got := DebVersion(in); got != want {
			t.Errorf("DebVersion(%q) = %q, want %q", in, got, want)
		}
	}
}
