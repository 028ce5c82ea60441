package retry_test

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"golang.org/x/net/http2"

	"github.com/kubewire/kubewire/pooltrace"
	"github.com/kubewire/kubewire/retry"
	"github.com/kubewire/kubewire/timeout"
)

func TestClassify(t *testing.T) {
	opErr := func(op string, err error) error {
		return &net.OpError{Op: op, Net: "tcp", Err: &os.SyscallError{Syscall: op, Err: err}}
	}
	tests := []struct {
		name string
		give error
		want retry.Class
	}{
		{"nil", nil, retry.NotRetryable},
		{"connection refused", opErr("dial", syscall.ECONNREFUSED), retry.NotSent},
		{"dial timeout", &net.OpError{Op: "dial", Err: os.ErrDeadlineExceeded}, retry.NotSent},
		{"dns temporary", &net.DNSError{Err: "server misbehaving", Name: "api", IsTemporary: true}, retry.NotSent},
		{"dns not found", &net.DNSError{Err: "no such host", Name: "api", IsNotFound: true}, retry.NotRetryable},
		{"tls handshake timeout", errors.New("net/http: TLS handshake timeout"), retry.NotSent},
		{"http2 refused stream", http2.StreamError{StreamID: 3, Code: http2.ErrCodeRefusedStream}, retry.NotSent},
		{"bundled http2 refused stream", errors.New("stream error: stream ID 3; REFUSED_STREAM"), retry.NotSent},
		{"http2 goaway unprocessed", errors.New("http2: Transport received Server's graceful shutdown GOAWAY"), retry.NotSent},
		{"http2 no cached conn", http2.ErrNoCachedConn, retry.NotSent},
		{"http2 goaway processed", http2.GoAwayError{LastStreamID: 5, ErrCode: http2.ErrCodeNo}, retry.MaybeSent},
		{"http2 internal error", http2.StreamError{StreamID: 3, Code: http2.ErrCodeInternal}, retry.MaybeSent},
		{"http2 connection lost", errors.New("http2: client connection lost"), retry.MaybeSent},
		{"http2 connection not established", errors.New("http2: client conn could not be established"), retry.NotSent},
		{"http2 connection force closed", errors.New("http2: client connection force closed via ClientConn.Close"), retry.MaybeSent},
		{"http2 connection closed under a body", errors.New("http2: client conn is closed"), retry.MaybeSent},
		{"reset on read", opErr("read", syscall.ECONNRESET), retry.MaybeSent},
		{"broken pipe", opErr("write", syscall.EPIPE), retry.MaybeSent},
		{"eof", io.EOF, retry.MaybeSent},
		{"unexpected eof", io.ErrUnexpectedEOF, retry.MaybeSent},
		{"server closed idle", errors.New("http: server closed idle connection"), retry.MaybeSent},
		{"read timeout", &net.OpError{Op: "read", Err: os.ErrDeadlineExceeded}, retry.MaybeSent},
		{"kubewire timeout", &timeout.Error{Limit: time.Second, Phase: timeout.PhaseHeaders}, retry.MaybeSent},
		{"wrapped by pooltrace", &pooltrace.Error{Err: opErr("read", syscall.ECONNRESET)}, retry.MaybeSent},
		{"wrapped by url.Error", &url.Error{Op: "Get", URL: "x", Err: opErr("dial", syscall.ECONNREFUSED)}, retry.NotSent},
		{"wrapped by fmt", fmt.Errorf("ctx: %w", io.EOF), retry.MaybeSent},
		{"caller canceled", context.Canceled, retry.NotRetryable},
		{"unknown authority", x509.UnknownAuthorityError{}, retry.NotRetryable},
		{"hostname mismatch", x509.HostnameError{Host: "x"}, retry.NotRetryable},
		{"unknown error", errors.New("net/http: invalid header field name"), retry.NotRetryable},
		{"request body failed", &retry.BodyError{Err: io.ErrUnexpectedEOF}, retry.NotRetryable},
		{"request body timed out", &retry.BodyError{Err: context.DeadlineExceeded}, retry.NotRetryable},
		{"request body failed, wrapped", &url.Error{Op: "Put", URL: "x", Err: &retry.BodyError{Err: opErr("read", syscall.ECONNRESET)}}, retry.NotRetryable},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, retry.Classify(tt.give), "%v", tt.give)
		})
	}
}

// FuzzClassify builds error chains from the input, one wrapper or leaf per
// byte, as net/http, net, x/net/http2, url and fmt nest them, and checks
// what must hold whatever the chain: Classify does not panic; a failed
// request body anywhere in the chain is never retryable, nor is a caller's
// cancellation; and wrapping with %w, as every layer above does, does not
// change the class.
func FuzzClassify(f *testing.F) {
	for _, s := range [][]byte{{0}, {1, 8}, {2, 9, 7}, {5, 3, 10}, {11, 4, 6, 12}} {
		f.Add(s)
	}
	leaves := []error{
		io.EOF, io.ErrUnexpectedEOF, context.DeadlineExceeded, context.Canceled,
		syscall.ECONNRESET, syscall.ECONNREFUSED, syscall.EPIPE, os.ErrDeadlineExceeded,
		http2.ErrNoCachedConn, http2.StreamError{StreamID: 1, Code: http2.ErrCodeRefusedStream},
		http2.GoAwayError{LastStreamID: 1}, errors.New("http2: client connection lost"),
		errors.New("net/http: TLS handshake timeout"), x509.UnknownAuthorityError{}, errors.New("other"),
	}
	f.Fuzz(func(t *testing.T, ops []byte) {
		if len(ops) == 0 || len(ops) > 32 {
			return
		}
		err := leaves[int(ops[0])%len(leaves)]
		body, canceled := false, errors.Is(err, context.Canceled)
		for _, op := range ops[1:] {
			switch op % 7 {
			case 0:
				err = &retry.BodyError{Err: err}
				body = true
			case 1:
				err = &net.OpError{Op: []string{"dial", "read", "write", "readfrom"}[int(op/7)%4], Net: "tcp", Err: err}
			case 2:
				err = &os.SyscallError{Syscall: "read", Err: err}
			case 3:
				err = &url.Error{Op: "Get", URL: "http://127.0.0.1:1/", Err: err}
			case 4:
				err = fmt.Errorf("write error: %w", err)
			case 5:
				err = &pooltrace.Error{Err: err}
			case 6:
				err = errors.Join(err, leaves[int(op/7)%len(leaves)])
				canceled = canceled || errors.Is(err, context.Canceled)
			}
		}
		c := retry.Classify(err)
		if body && c != retry.NotRetryable {
			t.Fatalf("Classify(%v) = %v: a failed request body is never retried", err, c)
		}
		if canceled && c != retry.NotRetryable {
			t.Fatalf("Classify(%v) = %v: a cancelled request is never retried", err, c)
		}
		if w := retry.Classify(fmt.Errorf("outer: %w", err)); w != c {
			t.Fatalf("Classify(%v) = %v, but %v once wrapped", err, c, w)
		}
	})
}
