package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"

	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"
	kjson "sigs.k8s.io/json"

	"github.com/kubewire/kubewire/driver"
)

// maxBody is the largest request body the gateway reads: 1 MiB.
const maxBody = 1 << 20

// createRequest is the body of a create.
type createRequest struct {
	Name        string                     `json:"name"`
	PodTemplate sandboxv1beta1.PodTemplate `json:"podTemplate"`
}

// decodeCreate reads the body of a create in namespace ns. The body must
// be one JSON object with only createRequest's fields, each spelled as its
// tag (case-sensitive, as the API server's strict decoding is) and given
// once, with nothing but white space after it. A body it refuses is an
// error of kind [driver.KindInvalidArgument] naming the problem; one cut
// off by [http.MaxBytesReader] keeps its [*http.MaxBytesError], which
// [statusOf] answers with 413, and one that could not be read is a
// [*bodyError].
func decodeCreate(ns string, body io.Reader) (createRequest, error) {
	req, err := decodeStrict(body)
	if err != nil {
		return createRequest{}, &driver.Error{Op: "create", Namespace: ns, Kind: driver.KindInvalidArgument, Err: err}
	}
	return req, nil
}

func decodeStrict(body io.Reader) (createRequest, error) {
	b, err := io.ReadAll(body)
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			return createRequest{}, fmt.Errorf("request body is larger than %d bytes (%g MiB): %w", tooLarge.Limit, float64(tooLarge.Limit)/(1<<20), err)
		}
		return createRequest{}, &bodyError{err}
	}
	switch v := bytes.TrimLeft(b, " \t\r\n"); {
	case len(v) == 0:
		return createRequest{}, errors.New("request body is empty: want a JSON object")
	case v[0] != '{':
		return createRequest{}, errors.New("request body is not a JSON object")
	}
	// Find the object's end first, so that what follows it is reported as
	// such rather than as a syntax error.
	dec := json.NewDecoder(bytes.NewReader(b))
	var obj json.RawMessage
	if err := dec.Decode(&obj); err != nil {
		return createRequest{}, fmt.Errorf("request body: %w", err)
	}
	end := dec.InputOffset()
	if _, err := dec.Token(); err != io.EOF {
		return createRequest{}, fmt.Errorf("request body has data after the JSON object, from byte %d", end)
	}
	var req createRequest
	strict, err := kjson.UnmarshalStrict(obj, &req)
	if err != nil {
		return createRequest{}, fmt.Errorf("request body: %w", err)
	}
	if len(strict) > 0 {
		return createRequest{}, strictError(strict)
	}
	return req, nil
}

// maxStrict is how many unknown or repeated fields an answer names.
const maxStrict = 5

// strictError names the body's first unknown or repeated fields on one
// line, each cut as [quoteValue] cuts a value, and counts the rest: a body
// of a megabyte of unknown fields gets an answer of a few hundred bytes.
// errors.Is and errors.As find every field's error.
func strictError(strict []error) error {
	var b strings.Builder
	b.WriteString("request body: ")
	for i, e := range strict[:min(len(strict), maxStrict)] {
		if i > 0 {
			b.WriteString("; ")
		}
		b.WriteString(cutText(e.Error(), 2*maxQuoted))
	}
	if n := len(strict) - maxStrict; n > 0 {
		fmt.Fprintf(&b, "; and %d more", n)
	}
	return &joinedError{msg: b.String(), errs: strict}
}

// joinedError is a message over errors that errors.Is and errors.As
// search, each of them.
type joinedError struct {
	msg  string
	errs []error
}

func (e *joinedError) Error() string   { return e.msg }
func (e *joinedError) Unwrap() []error { return e.errs }

// bodyError is a request body that could not be read, other than one
// over the limit: the client stopped sending it within -read-timeout, or
// went away. Its message, for the log, names the connection's addresses;
// [publicMessage] leaves them out.
type bodyError struct{ err error }

func (e *bodyError) Error() string { return "reading the request body: " + e.err.Error() }

func (e *bodyError) Unwrap() error { return e.err }

// Timeout reports whether the body did not arrive within -read-timeout.
func (e *bodyError) Timeout() bool { return errors.Is(e.err, os.ErrDeadlineExceeded) }

func (e *bodyError) public() string {
	if e.Timeout() {
		return "the request body did not arrive within the gateway's read timeout"
	}
	return "reading the request body failed"
}
