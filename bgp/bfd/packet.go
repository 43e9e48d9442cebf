// SPDX-License-Identifier: Apache-2.0
package bfd

import (
	"encoding/binary"
	"errors"
	"fmt"
	"time"
)

// State is a BFD session state (RFC 5880 §4.1, Sta).
type State uint8

const (
	AdminDown State = 0
	Down      State = 1
	Init      State = 2
	Up        State = 3
)

func (s State) String() string {
	switch s {
	case AdminDown:
		return "admin-down"
	case Down:
		return "down"
	case Init:
		return "init"
	case Up:
		return "up"
	}
	return fmt.Sprintf("state(%d)", uint8(s))
}

// Diag is a diagnostic code (RFC 5880 §4.1, Diag): why the local system last left Up.
type Diag uint8

const (
	DiagNone            Diag = 0
	DiagDetectExpired   Diag = 1 // Control Detection Time Expired
	DiagNeighborDown    Diag = 3 // Neighbor Signaled Session Down
	DiagForwardingReset Diag = 4 // Forwarding Plane Reset
	DiagAdminDown       Diag = 7 // Administratively Down
	maxDiag             Diag = 31
	version                  = 1
	packetLen                = 24 // a control packet without authentication
	flagPoll                 = 1 << 5
	flagFinal                = 1 << 4
	flagCPI                  = 1 << 3 // Control Plane Independent
	flagAuth                 = 1 << 2
	flagDemand               = 1 << 1
	flagMultipoint           = 1 << 0
	microsecond              = time.Microsecond
)

func (d Diag) String() string {
	switch d {
	case DiagNone:
		return "none"
	case DiagDetectExpired:
		return "detection time expired"
	case DiagNeighborDown:
		return "neighbor signaled down"
	case DiagForwardingReset:
		return "forwarding plane reset"
	case DiagAdminDown:
		return "administratively down"
	}
	return fmt.Sprintf("diag(%d)", uint8(d))
}

// Packet is a BFD control packet without authentication.
type Packet struct {
	Diag              Diag
	State             State
	Poll, Final       bool
	CPI               bool // Control Plane Independent (C bit)
	DetectMult        uint8
	MyDisc, YourDisc  uint32
	DesiredMinTx      time.Duration
	RequiredMinRx     time.Duration
	RequiredMinEchoRx time.Duration
}

// Marshal returns p's 24 bytes.
func (p Packet) Marshal() []byte {
	b := make([]byte, packetLen)
	b[0] = version<<5 | byte(p.Diag&maxDiag)
	b[1] = byte(p.State&3) << 6
	if p.Poll {
		b[1] |= flagPoll
	}
	if p.Final {
		b[1] |= flagFinal
	}
	if p.CPI {
		b[1] |= flagCPI
	}
	b[2] = p.DetectMult
	b[3] = packetLen
	binary.BigEndian.PutUint32(b[4:], p.MyDisc)
	binary.BigEndian.PutUint32(b[8:], p.YourDisc)
	binary.BigEndian.PutUint32(b[12:], usec(p.DesiredMinTx))
	binary.BigEndian.PutUint32(b[16:], usec(p.RequiredMinRx))
	binary.BigEndian.PutUint32(b[20:], usec(p.RequiredMinEchoRx))
	return b
}

func usec(d time.Duration) uint32 {
	v := d / microsecond
	if v < 0 {
		return 0
	}
	if v > 0xffffffff {
		return 0xffffffff
	}
	return uint32(v)
}

// Parse errors: each is a drop reason.
var (
	ErrShort      = errors.New("shorter than a control packet")
	ErrVersion    = errors.New("not version 1")
	ErrLength     = errors.New("length field wrong")
	ErrAuth       = errors.New("authentication present (none configured)")
	ErrMultipoint = errors.New("multipoint bit set")
	ErrDetectMult = errors.New("detect multiplier 0")
	ErrMyDisc     = errors.New("my discriminator 0")
)

// Parse checks b as RFC 5880 §6.8.6 asks before any session is looked at, and decodes it.
func Parse(b []byte) (Packet, error) {
	if len(b) < packetLen {
		return Packet{}, ErrShort
	}
	if b[0]>>5 != version {
		return Packet{}, ErrVersion
	}
	if b[1]&flagAuth != 0 {
		return Packet{}, ErrAuth // no authentication is configured: discard (§6.8.6)
	}
	if int(b[3]) != packetLen || int(b[3]) > len(b) {
		return Packet{}, ErrLength
	}
	if b[1]&flagMultipoint != 0 {
		return Packet{}, ErrMultipoint
	}
	if b[2] == 0 {
		return Packet{}, ErrDetectMult
	}
	p := Packet{
		Diag:              Diag(b[0] & byte(maxDiag)),
		State:             State(b[1] >> 6),
		Poll:              b[1]&flagPoll != 0,
		Final:             b[1]&flagFinal != 0,
		CPI:               b[1]&flagCPI != 0,
		DetectMult:        b[2],
		MyDisc:            binary.BigEndian.Uint32(b[4:]),
		YourDisc:          binary.BigEndian.Uint32(b[8:]),
		DesiredMinTx:      time.Duration(binary.BigEndian.Uint32(b[12:])) * microsecond,
		RequiredMinRx:     time.Duration(binary.BigEndian.Uint32(b[16:])) * microsecond,
		RequiredMinEchoRx: time.Duration(binary.BigEndian.Uint32(b[20:])) * microsecond,
	}
	if p.MyDisc == 0 {
		return Packet{}, ErrMyDisc
	}
	return p, nil
}
