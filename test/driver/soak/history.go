package soak

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"
)

// Kind is what a client operation does.
type Kind string

// The operations of the workload: the gateway's five, and the fence change
// an administrator makes directly against the API server.
const (
	Create Kind = "create"
	Stop   Kind = "stop"
	Start  Kind = "start"
	Delete Kind = "delete"
	Get    Kind = "get"
	Fence  Kind = "fence"
)

// writes reports whether k may change a sandbox.
func (k Kind) writes() bool { return k == Create || k == Stop || k == Start || k == Delete }

// Outcome is what the client learned, as Jepsen names it.
type Outcome string

const (
	// OK: acknowledged; the operation took effect.
	OK Outcome = "ok"
	// Fail: the API server answered that it did not take effect (not
	// found, already exists, conflict, precondition, invalid).
	Fail Outcome = "fail"
	// Unknown: no answer, or one that does not say (unavailable, internal,
	// a timeout): it may or may not have taken effect.
	Unknown Outcome = "unknown"
)

// State is a sandbox's intent, as an answer or the audit log shows it.
type State struct {
	Exists bool   `json:"exists"`
	UID    string `json:"uid,omitempty"`
	// ResourceVersion is the version the audit log shows; an answer of
	// the gateway carries none.
	ResourceVersion string `json:"resourceVersion,omitempty"`
	Running         bool   `json:"running,omitempty"`
	FenceUID        string `json:"fenceUID,omitempty"`
	FenceGeneration int64  `json:"fenceGeneration,omitempty"`
}

// sameIntent reports whether a and b are the same object with the same
// intent: existence, uid, running, and the fence it was admitted under.
func (s State) sameIntent(o State) bool {
	if !s.Exists || !o.Exists {
		return s.Exists == o.Exists
	}
	return s.UID == o.UID && s.Running == o.Running && s.FenceUID == o.FenceUID && s.FenceGeneration == o.FenceGeneration
}

func (s State) String() string {
	var at string
	if s.ResourceVersion != "" {
		at = " at rv " + s.ResourceVersion
	}
	switch {
	case !s.Exists:
		return "absent"
	case s.Running:
		return fmt.Sprintf("running(fence %d)%s", s.FenceGeneration, at)
	}
	return "stopped" + at
}

// Op is one client operation and its answer: an entry of the history.
type Op struct {
	// ID names the operation; its API requests carry it in their Audit-ID
	// (see [AuditID]).
	ID     string `json:"id"`
	Client int    `json:"client"`
	Kind   Kind   `json:"kind"`
	// Name is the sandbox's; empty for a fence change.
	Name    string    `json:"name,omitempty"`
	Start   time.Time `json:"start"`
	End     time.Time `json:"end"`
	Outcome Outcome   `json:"outcome"`
	// Status is the HTTP status of the answer; 0 if none came.
	Status int    `json:"status,omitempty"`
	Error  string `json:"error,omitempty"`
	// State is what an acknowledged answer said of the sandbox (absent for
	// a delete), or of the fence (FenceUID, FenceGeneration) for a fence
	// change.
	State *State `json:"state,omitempty"`
}

// Recorder appends operations to a history as JSON lines. It is safe for
// concurrent use.
type Recorder struct {
	mu  sync.Mutex
	w   *bufio.Writer
	err error
}

// NewRecorder returns a recorder that writes to w. Call Flush at the end.
func NewRecorder(w io.Writer) *Recorder { return &Recorder{w: bufio.NewWriter(w)} }

// Record appends op.
func (r *Recorder) Record(op Op) {
	b, err := json.Marshal(op)
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.err != nil {
		return
	}
	if err != nil {
		r.err = err
		return
	}
	b = append(b, '\n')
	_, r.err = r.w.Write(b)
}

// Flush writes what is buffered and returns the first error of any write.
func (r *Recorder) Flush() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.err != nil {
		return r.err
	}
	return r.w.Flush()
}

// ReadHistory reads a history that a Recorder wrote.
func ReadHistory(r io.Reader) ([]Op, error) {
	var ops []Op
	dec := json.NewDecoder(r)
	for {
		var op Op
		err := dec.Decode(&op)
		if err == io.EOF {
			return ops, nil
		}
		if err != nil {
			return nil, fmt.Errorf("history entry %d: %w", len(ops)+1, err)
		}
		ops = append(ops, op)
	}
}

// opPrefix starts every operation ID; idempotentSuffix marks the Audit-ID
// of a request the client had marked idempotent.
const (
	opPrefix         = "op-"
	idempotentSuffix = "/idempotent"
)

// OpID returns the ID of the n-th operation.
func OpID(n int64) string { return fmt.Sprintf("%s%06d", opPrefix, n) }

// AuditID returns the Audit-ID of a request of operation op, marked if the
// request was marked idempotent.
func AuditID(op string, idempotent bool) string {
	if idempotent {
		return op + idempotentSuffix
	}
	return op
}

// ParseAuditID returns the operation and the idempotent mark of an
// Audit-ID that [AuditID] made; ok is false for any other (one the API
// server generated).
func ParseAuditID(id string) (op string, idempotent, ok bool) {
	if !strings.HasPrefix(id, opPrefix) {
		return "", false, false
	}
	op, idempotent = strings.CutSuffix(id, idempotentSuffix)
	return op, idempotent, true
}
