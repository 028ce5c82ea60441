package kubeadapter

import (
	"bytes"
	"errors"
	"io"
	"mime"
	"net/http"
	"strconv"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer/cbor/direct"
	utiljson "k8s.io/apimachinery/pkg/util/json"
)

// maybeAppliedNote is added to the message of a Status that refuses a copy
// re-sent after an earlier one may have reached the API server.
const maybeAppliedNote = " (kubewire: this answers a copy of the request sent again after the connection failed; the earlier copy may have been applied)"

// CauseTypeMaybeApplied is the type of the cause kubewire adds to the Status
// of a refused re-sent copy (see [IsMaybeApplied]).
const CauseTypeMaybeApplied metav1.CauseType = "kubewire.io/MaybeApplied"

// IsMaybeApplied reports whether err is, or wraps, the API server's
// refusal (404, 409 or 422) of a copy of a write that kubewire sent again
// after the connection failed under an earlier copy: the earlier copy may
// have been applied. A 409 on a resourceVersion guard or a failed
// precondition then often means that the first copy did what the caller
// asked; read the object again to know. The Status carries a cause of
// type [CauseTypeMaybeApplied], beside the note in its message.
func IsMaybeApplied(err error) bool {
	var se apierrors.APIStatus
	if !errors.As(err, &se) {
		return false
	}
	d := se.Status().Details
	if d == nil {
		return false
	}
	for _, c := range d.Causes {
		if c.Type == CauseTypeMaybeApplied {
			return true
		}
	}
	return false
}

// maxStatus bounds the Status body read to say so; a Status is small.
const maxStatus = 1 << 20

// selfDescribedCBOR (tag 55799) prefixes the API server's CBOR.
var selfDescribedCBOR = []byte{0xd9, 0xd9, 0xf7}

// sayMaybeApplied adds maybeAppliedNote to the Status of resp, a refusal
// of a re-sent copy (retry.MaybeApplied; see the package documentation). A
// body that is not a Status it can decode (JSON, protobuf or CBOR) is
// given back as it was.
func sayMaybeApplied(resp *http.Response) {
	switch resp.StatusCode {
	case http.StatusConflict, http.StatusNotFound, http.StatusUnprocessableEntity:
	default:
		return
	}
	if resp.Body == nil || resp.Body == http.NoBody || resp.Header.Get("Content-Encoding") != "" {
		return
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxStatus+1))
	if err != nil || len(body) > maxStatus {
		// Not a Status to rewrite: hand the caller what was read, then the
		// rest, or the read's failure where it would have met it.
		rest := resp.Body
		if err != nil {
			rest = io.NopCloser(errReader{err})
		}
		resp.Body = struct {
			io.Reader
			io.Closer
		}{io.MultiReader(bytes.NewReader(body), rest), resp.Body}
		return
	}
	_ = resp.Body.Close()
	resp.Body = io.NopCloser(bytes.NewReader(body))
	out, ok := withNote(resp.Header.Get("Content-Type"), body)
	if !ok {
		return
	}
	resp.Body = io.NopCloser(bytes.NewReader(out))
	resp.ContentLength = int64(len(out))
	if resp.Header.Get("Content-Length") != "" {
		resp.Header.Set("Content-Length", strconv.Itoa(len(out)))
	}
}

// withNote returns body, a Status in the media type contentType, with
// maybeAppliedNote added to its message.
func withNote(contentType string, body []byte) ([]byte, bool) {
	mt, _, err := mime.ParseMediaType(contentType)
	if err != nil {
		return nil, false
	}
	var s metav1.Status
	switch mt {
	case "application/json":
		if utiljson.Unmarshal(body, &s) != nil || s.Kind != "Status" {
			return nil, false
		}
		note(&s)
		b, err := utiljson.Marshal(&s)
		return b, err == nil
	case "application/vnd.kubernetes.protobuf":
		// Read the envelope as Resendable does (protobufSerializer).
		var u runtime.Unknown
		if _, _, err := protobufSerializer.Decode(body, nil, &u); err != nil || u.Kind != "Status" || s.Unmarshal(u.Raw) != nil {
			return nil, false
		}
		note(&s)
		raw, err := s.Marshal()
		if err != nil {
			return nil, false
		}
		u.Raw = raw
		var b bytes.Buffer
		err = protobufSerializer.Encode(&u, &b)
		return b.Bytes(), err == nil
	case "application/cbor":
		// The API server prefixes its CBOR with the self-described tag.
		prefix := body[:0]
		if bytes.HasPrefix(body, selfDescribedCBOR) {
			prefix = selfDescribedCBOR
		}
		if direct.Unmarshal(body[len(prefix):], &s) != nil || s.Kind != "Status" {
			return nil, false
		}
		note(&s)
		b, err := direct.Marshal(&s)
		return append(append([]byte(nil), prefix...), b...), err == nil
	}
	return nil, false
}

// note adds maybeAppliedNote to s's message, and a cause of type
// CauseTypeMaybeApplied to its details.
func note(s *metav1.Status) {
	s.Message += maybeAppliedNote
	if s.Details == nil {
		s.Details = &metav1.StatusDetails{}
	}
	s.Details.Causes = append(s.Details.Causes, metav1.StatusCause{
		Type:    CauseTypeMaybeApplied,
		Message: "an earlier copy of this request may have been applied",
	})
}

// dryRun reports whether req is certainly a dry run, read as the API
// server reads it (dryRunAll, as Resendable reads it): a refusal of its
// re-sent copy says nothing of an earlier copy, which applied nothing. A
// DELETE with a body is a dry run by its DeleteOptions' dryRun alone, since
// the API server then ignores the query; a body that cannot be read or
// decoded is not known to be one, and its refusal gets the note.
func dryRun(req *http.Request) bool {
	if req.URL == nil {
		return false
	}
	query := req.URL.Query()
	if req.Method == http.MethodDelete {
		opts, ok := deleteOptions(req, query)
		return ok && dryRunAll(opts.DryRun)
	}
	return dryRunAll(query["dryRun"])
}

// errReader fails every read with err.
type errReader struct{ err error }

func (r errReader) Read([]byte) (int, error) { return 0, r.err }
