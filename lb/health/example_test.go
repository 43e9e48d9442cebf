// SPDX-License-Identifier: Apache-2.0
package health_test

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"time"

	"github.com/xlb-dev/xlb/lb/health"
)

// A reconciler gives the Checker its backends and drains those that fail.
func Example() {
	// A backend: a TCP listener on loopback.
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer ln.Close()
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			conn.Close()
		}
	}()

	updates := make(chan health.Update, 1)
	c := health.New(health.Options{
		OnChange: func(u health.Update) { updates <- u }, // a reconciler would update its model here
		Logger:   slog.New(slog.DiscardHandler),
	})
	err = c.Set([]health.Target{{
		Key:   "default/web:80 127.0.0.1",
		Addr:  ln.Addr().(*net.TCPAddr).AddrPort(),
		Check: health.Check{Kind: health.TCP, Interval: 100 * time.Millisecond},
	}})
	if err != nil {
		fmt.Println(err)
		return
	}
	st, _ := c.Status("default/web:80 127.0.0.1")
	fmt.Println("before the first probe:", st.Health)

	// Set may be called before or after Run; probing starts with Run.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go c.Run(ctx)
	u := <-updates
	fmt.Printf("%s: %v (%s)\n", u.Key, u.Health, u.Reason)

	// Output:
	// before the first probe: unknown
	// default/web:80 127.0.0.1: healthy (first probe succeeded)
}
