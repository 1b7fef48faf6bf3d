package gateway

import (
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/andybalholm/brotli"
	"github.com/klauspost/compress/zstd"

	"github.com/tokenterminator/caddy-token-terminator/internal/compiler"
)

// Request bodies sent with Content-Encoding (Codex sends zstd) are decoded
// within max_body_size, compiled, and a rewrite is encoded again in the
// same coding; a pass-through forwards the bytes the client sent. One
// coding of zstd, gzip or br is read; any other, or a list of codings,
// streams through untouched (passthrough=content_encoding).

// Codings the module decodes, by their Content-Encoding token.
const (
	codingZstd   = "zstd"
	codingGzip   = "gzip"
	codingBrotli = "br"
)

// requestCoding reports the request body's content coding: "" for none
// (or identity), ok false for one the module does not decode.
func requestCoding(r *http.Request) (coding string, ok bool) {
	v := r.Header.Values("Content-Encoding")
	if len(v) == 0 {
		return "", true
	}
	if len(v) > 1 || strings.Contains(v[0], ",") {
		return "", false // stacked codings: not read
	}
	switch c := strings.ToLower(strings.TrimSpace(v[0])); c {
	case "", "identity":
		return "", true
	case codingZstd, codingGzip, "x-gzip", codingBrotli:
		if c == "x-gzip" {
			c = codingGzip
		}
		return c, true
	}
	return "", false
}

// zstdMaxWindow bounds the window a zstd frame may ask the decoder for:
// the decoder's memory, whatever a frame header declares.
const zstdMaxWindow = 8 << 20

// errDecodedTooLarge: the decoded body is longer than the bound (a
// decompression bomb, or only a large body).
var errDecodedTooLarge = errors.New("decoded body larger than max_body_size")

// decodeBody decodes b of coding into at most limit bytes. The detail of an
// error is safe to log: it never quotes the body.
func decodeBody(coding string, b []byte, limit int64) ([]byte, error) {
	var rd io.Reader
	switch coding {
	case codingZstd:
		d, err := zstd.NewReader(bytes.NewReader(b), zstd.WithDecoderConcurrency(1),
			zstd.WithDecoderMaxWindow(zstdMaxWindow), zstd.WithDecoderMaxMemory(max(uint64(limit)+1, 1<<16)))
		if err != nil {
			return nil, fmt.Errorf("zstd: %v", err)
		}
		defer d.Close()
		rd = d
	case codingGzip:
		g, err := gzip.NewReader(bytes.NewReader(b))
		if err != nil {
			return nil, fmt.Errorf("gzip: %v", err)
		}
		rd = g
	case codingBrotli:
		rd = brotli.NewReader(bytes.NewReader(b))
	default:
		return nil, fmt.Errorf("coding %q is not decoded", coding)
	}
	var out bytes.Buffer
	out.Grow(min(int(limit)+1, 4*len(b)+512))
	n, err := io.Copy(&out, io.LimitReader(rd, limit+1))
	if n > limit {
		return nil, errDecodedTooLarge
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %v", coding, err)
	}
	return out.Bytes(), nil
}

// encodeBody encodes b in coding with fixed settings, so the same rewrite
// is always the same bytes (prompt caches, retries).
func encodeBody(coding string, b []byte) ([]byte, error) {
	var out bytes.Buffer
	out.Grow(len(b)/4 + 64)
	var w io.WriteCloser
	switch coding {
	case codingZstd:
		e, err := zstd.NewWriter(&out, zstd.WithEncoderConcurrency(1), zstd.WithEncoderLevel(zstd.SpeedDefault))
		if err != nil {
			return nil, err
		}
		w = e
	case codingGzip:
		// A Writer's header carries no name and no time: the same input
		// always gives the same bytes.
		w = gzip.NewWriter(&out)
	case codingBrotli:
		w = brotli.NewWriterLevel(&out, 5)
	default:
		return nil, fmt.Errorf("coding %q is not encoded", coding)
	}
	if _, err := w.Write(b); err != nil {
		return nil, err
	}
	if err := w.Close(); err != nil {
		return nil, err
	}
	return out.Bytes(), nil
}

// encodeRewrite gives what goes upstream for an encoded request: the
// client's own bytes (wire) unless the compile's rewrite (out, decoded
// from wire as plain) is forwarded, which is then encoded in coding. A
// rewrite that cannot be encoded is not forwarded: the result becomes a
// pass-through of the original, with no lineage to commit.
func encodeRewrite(coding string, wire, plain, out []byte, res compiler.Result, mode compiler.Mode) (sent, forwarded []byte, _ compiler.Result) {
	if mode != compiler.ModeEnforce || res.Decision != compiler.Accepted || res.Body == nil {
		return wire, plain, res
	}
	enc, err := encodeBody(coding, out)
	if err != nil {
		res.Body, res.Decision, res.Reason, res.Commit = nil, compiler.Passthrough, ReasonContentEncoding, nil
		res.SentBytes = res.RawBytes
		return wire, plain, res
	}
	return enc, out, res
}
