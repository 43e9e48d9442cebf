// SPDX-License-Identifier: Apache-2.0

// Package linkpin removes pinned BPF links so that their programs are detached by the time the
// call returns.
//
// Unlinking a link's pin from bpffs drops a reference, and the kernel releases the last one of a
// link from a workqueue: the program can go on running for a moment after os.Remove returned.
// `xlb cleanup` and the removal paths promise that forwarding has stopped when they return, so
// they detach the link first (BPF_LINK_DETACH, synchronous), then remove the pin.
package linkpin

import (
	"errors"
	"fmt"
	"os"

	"github.com/cilium/ebpf/link"
)

// Remove detaches the link pinned at path and removes the pin. A missing pin is no error. A link
// that cannot be detached explicitly (a kernel or link type without BPF_LINK_DETACH) is still
// unpinned, and so released once nothing else holds it.
func Remove(path string) error {
	var errs []error
	l, err := link.LoadPinnedLink(path, nil)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return nil
	case err != nil:
		errs = append(errs, fmt.Errorf("open pinned link %s: %w", path, err))
	default:
		if err := l.Detach(); err != nil && !errors.Is(err, link.ErrNotSupported) {
			errs = append(errs, fmt.Errorf("detach pinned link %s: %w", path, err))
		}
		_ = l.Close()
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		errs = append(errs, fmt.Errorf("unpin link %s: %w", path, err))
	}
	return errors.Join(errs...)
}
