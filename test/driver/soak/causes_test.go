package soak

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

func TestErrorCause(t *testing.T) {
	tests := []struct {
		name string
		give error
		want string
	}{
		{name: "GOAWAY", give: errors.New("http2: server sent GOAWAY and closed the connection; LastStreamID=5, ErrCode=NO_ERROR, debug=\"\""), want: CauseGoaway},
		{name: "refused", give: &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}, want: CauseConnLoss},
		{name: "reset", give: fmt.Errorf("read: %w", syscall.ECONNRESET), want: CauseConnLoss},
		{name: "EOF", give: io.ErrUnexpectedEOF, want: CauseConnLoss},
		{name: "connection lost", give: errors.New("http2: client connection lost"), want: CauseConnLoss},
		{name: "gateway gave up", give: fmt.Errorf("proxy: %w", context.Canceled), want: CauseDeadline},
		{name: "deadline", give: context.DeadlineExceeded, want: CauseDeadline},
		{name: "other", give: errors.New("x509: certificate signed by unknown authority"), want: CauseOther},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, errorCause(tt.give))
		})
	}
}

func TestFailures(t *testing.T) {
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	op := func(id string, from, to int, outcome Outcome, status int, err string) Op {
		return Op{ID: id, Kind: Stop, Start: at(from), End: at(to), Outcome: outcome, Status: status, Error: err}
	}
	in := Input{
		History: []Op{
			op("ok", 0, 1, OK, 200, ""),
			op("refused", 0, 1, Fail, 404, "not found"),
			op("drained", 10, 16, Unknown, 503, `{"kind":"unavailable"}`),
			op("killed", 20, 21, Unknown, 503, `{"kind":"unavailable"}`),
			op("client-timeout", 30, 50, Unknown, 0, "context deadline exceeded"),
			op("unexplained", 60, 61, Unknown, 500, `{"kind":"internal"}`),
			op("cut", 70, 71, Unknown, 0, endOfRun+"context deadline exceeded"),
			{ID: "fence", Kind: Fence, Start: at(22), End: at(23), Outcome: Unknown, Error: "read tcp: connection reset by peer"},
		},
		Faults: []Window{{Fault: FaultRestart, From: at(9), To: at(12)}, {Fault: FaultBlackHole, From: at(19), To: at(25)}},
		Causes: map[string][]Upstream{
			"drained": {answered(429)},
			"killed":  {failed(context.Canceled), failed(io.EOF)},
		},
	}
	r := &Result{}
	r.failures(in)
	got := map[string]CauseCount{}
	for _, c := range r.FailuresByCause {
		got[c.Cause] = c
	}
	assert.Len(t, r.FailuresByCause, len(causeNames), "every cause, failed or not")
	assert.Equal(t, map[string]int{FaultRestart: 1}, got[CauseUnavailable].ByWindow)
	assert.Equal(t, map[string]int{FaultBlackHole: 2}, got[CauseConnLoss].ByWindow, "the last upstream cause, and the fence change's error")
	assert.Equal(t, map[string]int{NoWindow: 1}, got[CauseDeadline].ByWindow, "no answer within the client's deadline")
	assert.Equal(t, map[string]int{NoWindow: 1}, got[CauseOther].ByWindow, "a 5xx no failed request explains")
	assert.Equal(t, map[string]int{NoWindow: 1}, got[CauseRefused].ByWindow)
	assert.Equal(t, map[string]int{NoWindow: 1}, got[CauseEndOfRun].ByWindow)
	assert.Zero(t, got[CauseGoaway].Total)
	assert.Len(t, r.Failures, 7)
}
