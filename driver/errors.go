package driver

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/kubewire/kubewire/driver/internal/core"
)

// Errors an [*Error] may wrap, for errors.Is.
var (
	// ErrNotOwned: the sandbox exists but another driver, or another
	// gateway, manages it (KindPrecondition). A program that answers
	// callers who may not learn which names exist can answer it as it
	// answers KindNotFound.
	ErrNotOwned = core.ErrNotOwned
	// ErrNotServed: the namespace is not one the driver serves
	// (KindInvalidArgument). The error's text lists those it serves.
	ErrNotServed = errors.New("namespace not served")
)

// Kind classifies a driver error.
type Kind int

const (
	// KindUnavailable: the API server could not be reached or did not
	// answer in time; the state is unknown.
	KindUnavailable Kind = iota + 1
	// KindNotFound: the sandbox does not exist.
	KindNotFound
	// KindAlreadyExists: a sandbox with that name exists.
	KindAlreadyExists
	// KindConflict: the sandbox kept changing under the operation.
	KindConflict
	// KindPrecondition: the sandbox is not the one the operation was for
	// (its uid changed), or not in a state the operation accepts.
	KindPrecondition
	// KindInvalidArgument: bad input; nothing was sent.
	KindInvalidArgument
	// KindInternal: anything else the API server answered.
	KindInternal
	// KindForbidden: the API server refused the request (403 Forbidden):
	// its authorizer (RBAC lacks the verb) or an admission check (a quota,
	// a namespace being deleted). The error's message, the API server's,
	// says which.
	KindForbidden
)

var kindNames = [...]string{
	KindUnavailable:     "unavailable",
	KindNotFound:        "not found",
	KindAlreadyExists:   "already exists",
	KindConflict:        "conflict",
	KindPrecondition:    "precondition failed",
	KindInvalidArgument: "invalid argument",
	KindInternal:        "internal",
	KindForbidden:       "forbidden",
}

func (k Kind) String() string {
	if k > 0 && int(k) < len(kindNames) {
		return kindNames[k]
	}
	return fmt.Sprintf("Kind(%d)", int(k))
}

// Error is the error of a driver operation. Unwrap returns the cause, so
// errors.Is and errors.As see the whole chain down to the transport.
type Error struct {
	Op        string
	Namespace string
	Name      string
	Kind      Kind
	Err       error
}

func (e *Error) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "driver: %s sandbox", e.Op)
	if e.Namespace != "" || e.Name != "" {
		fmt.Fprintf(&b, " %s/%s", cut(e.Namespace), cut(e.Name))
	}
	fmt.Fprintf(&b, ": %s", e.Kind)
	if e.Err != nil {
		b.WriteString(": ")
		b.WriteString(e.Err.Error())
	}
	return b.String()
}

func (e *Error) Unwrap() error { return e.Err }

// KindOf returns the Kind of a driver error, or 0 if err is not one.
func KindOf(err error) Kind {
	var e *Error
	if errors.As(err, &e) {
		return e.Kind
	}
	return 0
}

// maxShown is the most of a value from a request an error shows; a name
// or namespace is at most 63 bytes when valid, and an invalid one can be
// as long as the request that carried it.
const maxShown = 64

// cut returns v as an error shows a name: as it is, or quoted when it has
// a control character or is not UTF-8, so that it cannot forge a log line;
// its first maxShown bytes and its length when longer.
func cut(v string) string {
	plain := utf8.ValidString(v) && strings.IndexFunc(v, func(r rune) bool { return r < ' ' || r == 0x7f }) < 0
	if plain && len(v) <= maxShown {
		return v
	}
	if !plain {
		return quoted(v)
	}
	return fmt.Sprintf("%s... (%d bytes)", v[:prefix(v)], len(v))
}

// quoted returns v quoted, cut as [cut] cuts it.
func quoted(v string) string {
	if len(v) <= maxShown {
		return strconv.Quote(v)
	}
	return fmt.Sprintf("%s... (%d bytes)", strconv.Quote(v[:prefix(v)]), len(v))
}

// prefix is how many of v's first bytes to show: at most maxShown, not
// splitting a character.
func prefix(v string) int {
	n := min(len(v), maxShown)
	for n > 0 && n < len(v) && !utf8.RuneStart(v[n]) {
		n--
	}
	return n
}

func invalid(op, ns, name, format string, args ...any) *Error {
	return &Error{Op: op, Namespace: ns, Name: name, Kind: KindInvalidArgument, Err: fmt.Errorf(format, args...)}
}

// wrap turns an error from client-go into an *Error, keeping it whole.
func wrap(op, ns, name string, err error) *Error {
	var de *Error
	if errors.As(err, &de) {
		return de
	}
	return &Error{Op: op, Namespace: ns, Name: name, Kind: kindFor(err), Err: err}
}

func kindFor(err error) Kind {
	switch {
	case errors.Is(err, core.ErrNotOwned):
		return KindPrecondition
	case errors.Is(err, core.ErrNotInstalled):
		return KindNotFound
	case errors.Is(err, core.ErrV1alpha1Only):
		return KindPrecondition
	}
	var status apierrors.APIStatus
	if !errors.As(err, &status) {
		// No answer from the API server: a transport error, a timeout or a
		// cancelled context. The state is unknown.
		return KindUnavailable
	}
	switch {
	case apierrors.IsNotFound(err):
		return KindNotFound
	case apierrors.IsAlreadyExists(err):
		return KindAlreadyExists
	case apierrors.IsConflict(err):
		return KindConflict
	case apierrors.IsForbidden(err):
		return KindForbidden
	case apierrors.IsInvalid(err), apierrors.IsBadRequest(err):
		return KindInvalidArgument
	case apierrors.IsTimeout(err), apierrors.IsServerTimeout(err), apierrors.IsServiceUnavailable(err), apierrors.IsTooManyRequests(err):
		return KindUnavailable
	}
	return KindInternal
}
