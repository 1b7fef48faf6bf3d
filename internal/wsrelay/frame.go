// Package wsrelay relays an RFC 6455 WebSocket stream frame by frame,
// rewriting only whole text messages a caller chooses and forwarding every
// other byte as it came.
//
// The client-to-server direction (Reader) holds the frames of a text
// message (and control frames interleaved with its fragments) until the
// message is whole, then either forwards the held bytes unchanged or, when
// the caller's Rewrite returns a replacement, the held control frames
// followed by one new masked frame carrying it. A message over the bound
// is streamed on unchanged from the moment it crosses it. Anything the
// relay does not read as a valid client frame sequence (reserved bits set,
// as with a negotiated extension; an unmasked frame; a reserved opcode; a
// fragmented or long control frame) switches the connection to a plain
// byte copy for good, so the peer sees and judges the bytes it would have
// seen without the relay.
//
// The server-to-client direction (Tap) forwards bytes untouched and hands
// each whole text message within its bound to an observer.
package wsrelay

import (
	"encoding/binary"
	"errors"
)

// Opcodes (RFC 6455 section 5.2).
const (
	OpContinuation = 0x0
	OpText         = 0x1
	OpBinary       = 0x2
	OpClose        = 0x8
	OpPing         = 0x9
	OpPong         = 0xA
)

// Header is a frame's header as sent.
type Header struct {
	Fin    bool
	Rsv    byte // the three reserved bits, in place (0x70)
	Op     byte
	Masked bool
	Key    [4]byte
	Length int64 // payload length
	Size   int   // header bytes
}

// ErrFrame: a header no conforming peer sends.
var ErrFrame = errors.New("wsrelay: malformed frame header")

// ParseHeader reads a frame header from the start of b. ok is false when b
// is too short to hold the whole header.
func ParseHeader(b []byte) (h Header, ok bool, err error) {
	if len(b) < 2 {
		return h, false, nil
	}
	h.Fin = b[0]&0x80 != 0
	h.Rsv = b[0] & 0x70
	h.Op = b[0] & 0x0F
	h.Masked = b[1]&0x80 != 0
	n := int64(b[1] & 0x7F)
	h.Size = 2
	switch n {
	case 126:
		h.Size += 2
	case 127:
		h.Size += 8
	}
	if h.Masked {
		h.Size += 4
	}
	if len(b) < h.Size {
		return h, false, nil
	}
	switch n {
	case 126:
		n = int64(binary.BigEndian.Uint16(b[2:4]))
	case 127:
		u := binary.BigEndian.Uint64(b[2:10])
		if u>>63 != 0 {
			return h, true, ErrFrame // the most significant bit must be 0
		}
		n = int64(u)
	}
	h.Length = n
	if h.Masked {
		copy(h.Key[:], b[h.Size-4:h.Size])
	}
	return h, true, nil
}

// Control reports a control frame.
func (h Header) Control() bool { return h.Op&0x8 != 0 }

// AppendFrame appends one frame of op with payload p, masked with key when
// mask is set.
func AppendFrame(dst []byte, fin bool, op byte, mask bool, key [4]byte, p []byte) []byte {
	b0 := op & 0x0F
	if fin {
		b0 |= 0x80
	}
	var m byte
	if mask {
		m = 0x80
	}
	switch n := len(p); {
	case n < 126:
		dst = append(dst, b0, m|byte(n))
	case n <= 0xFFFF:
		dst = append(dst, b0, m|126, byte(n>>8), byte(n))
	default:
		dst = append(dst, b0, m|127)
		dst = binary.BigEndian.AppendUint64(dst, uint64(n))
	}
	if !mask {
		return append(dst, p...)
	}
	dst = append(dst, key[:]...)
	start := len(dst)
	dst = append(dst, p...)
	MaskBytes(key, 0, dst[start:])
	return dst
}

// MaskBytes masks (or unmasks) b in place, b starting at payload offset
// pos; it returns the offset after b.
func MaskBytes(key [4]byte, pos int, b []byte) int {
	for i := range b {
		b[i] ^= key[(pos+i)&3]
	}
	return pos + len(b)
}
