// SPDX-License-Identifier: Apache-2.0
package netlab

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"time"
)

// HTTPGet fetches http://addr/path from inside n (one request, connection closed after) and
// returns the status code and body. Every step is bounded by timeout.
func (n *NS) HTTPGet(addr, path string, timeout time.Duration) (int, string, error) {
	var c net.Conn
	err := n.Do(func() (err error) {
		c, err = net.DialTimeout("tcp", addr, timeout)
		return err
	})
	if err != nil {
		return 0, "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(timeout))
	req, _ := http.NewRequest(http.MethodGet, "http://"+addr+path, nil)
	req.Close = true
	if err := req.Write(c); err != nil {
		return 0, "", err
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body), err
}
