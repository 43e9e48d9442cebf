package xdp

import "testing"

func TestLoadNoPin(t *testing.T) {
	d, err := Load(Options{NoPin: true, ConntrackSize: 4096})
	if err != nil {
		t.Fatalf("%+v", err)
	}
	defer d.Close()
}
