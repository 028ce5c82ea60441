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
		{"reset on read", opErr("read", syscall.ECONNRESET), retry.MaybeSent},
		{"broken pipe", opErr("write", syscall.EPIPE), retry.MaybeSent},
		{"eof", io.EOF, retry.MaybeSent},
		{"unexpected eof", io.ErrUnexpectedEOF, retry.MaybeSent},
		{"server closed idle", errors.New("http: server closed idle connection"), retry.MaybeSent},
		{"read timeout", &net.OpError{Op: "read", Err: os.ErrDeadlineExceeded}, retry.MaybeSent},
		{"kubewire timeout", &timeout.Error{Budget: time.Second, Phase: timeout.PhaseHeaders}, retry.MaybeSent},
		{"wrapped by pooltrace", &pooltrace.Error{Err: opErr("read", syscall.ECONNRESET)}, retry.MaybeSent},
		{"wrapped by url.Error", &url.Error{Op: "Get", URL: "x", Err: opErr("dial", syscall.ECONNREFUSED)}, retry.NotSent},
		{"wrapped by fmt", fmt.Errorf("ctx: %w", io.EOF), retry.MaybeSent},
		{"caller canceled", context.Canceled, retry.NotRetryable},
		{"unknown authority", x509.UnknownAuthorityError{}, retry.NotRetryable},
		{"hostname mismatch", x509.HostnameError{Host: "x"}, retry.NotRetryable},
		{"unknown error", errors.New("net/http: invalid header field name"), retry.NotRetryable},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, retry.Classify(tt.give), "%v", tt.give)
		})
	}
}
