// SPDX-License-Identifier: Apache-2.0
package gateway

import (
	"testing"

	"github.com/xlb-dev/xlb/xdp/datapath"
)

func TestLoadNoPin(t *testing.T) {
	d, err := Load(Options{NoPin: true, Settings: datapath.Settings{ConntrackSize: 4096}})
	if err != nil {
		t.Fatalf("%+v", err)
	}
	defer d.Close()
}
