package tracing

import (
	"context"
	"errors"
	"fmt"
	"io"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/kubewire/kubewire/retry"
	"github.com/kubewire/kubewire/timeout"
)

// TestEndAttributesFit: the attributes an attempt's span ends with fill the
// slice made for them exactly, and fit the buffer endAttributes builds them
// in, whatever the attempt saw: more would move the buffer to the heap, and
// a span copies its attributes again.
func TestEndAttributesFit(t *testing.T) {
	// The most a request has: an unknown method and its original, the
	// server's address and port, and url.full.
	request := []attribute.KeyValue{attribute.String("a", "a"), attribute.String("b", "b"), attribute.String("c", "c"), attribute.String("d", "d"), attribute.String("e", "e")}
	type state struct {
		n                        int
		hasConn, reused, wasIdle bool
		resends                  int
	}
	var states []state
	for _, n := range []int{1, 2} {
		for _, c := range []state{{}, {hasConn: true}, {hasConn: true, reused: true}, {hasConn: true, reused: true, wasIdle: true}, {hasConn: true, resends: 1}, {hasConn: true, reused: true, wasIdle: true, resends: 1}} {
			c.n = n
			states = append(states, c)
		}
	}
	outcomes := []struct {
		status int
		err    error
	}{
		{0, nil}, {200, nil}, {404, nil}, {503, nil},
		{0, context.Canceled}, {0, fmt.Errorf("read: %w", context.Canceled)},
		{0, &timeout.Error{Limit: time.Second, Phase: timeout.PhaseHeaders}}, {0, io.ErrUnexpectedEOF}, {200, errors.New("body")},
		{200, context.Canceled}, {404, io.ErrUnexpectedEOF},
		{0, &retry.Error{Causes: []error{io.EOF, context.Canceled}}}, {0, &retry.Error{Causes: []error{context.Canceled, io.EOF}}},
	}
	for _, st := range states {
		for _, o := range outcomes {
			as := &attemptSpan{Span: trace.SpanFromContext(context.Background()), n: st.n, request: request,
				hasConn: st.hasConn, reused: st.reused, wasIdle: st.wasIdle, resends: st.resends, proto: "HTTP/1.1", idle: time.Second}
			attrs := as.endAttributes(o.status, o.err)
			if len(attrs) != cap(attrs) {
				t.Errorf("%+v, status %d, error %v: %d attributes in a slice of %d", st, o.status, o.err, len(attrs), cap(attrs))
			}
			if len(attrs) > maxAttemptAttributes {
				t.Errorf("%+v, status %d, error %v: %d attributes, more than maxAttemptAttributes", st, o.status, o.err, len(attrs))
			}
		}
	}
}
