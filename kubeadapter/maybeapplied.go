package kubeadapter

import (
	"bytes"
	"io"
	"mime"
	"net/http"
	"strconv"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer/cbor/direct"
	utiljson "k8s.io/apimachinery/pkg/util/json"
)

// maybeAppliedNote is added to the message of a Status that refuses a copy
// re-sent after an earlier one may have reached the API server.
const maybeAppliedNote = " (kubewire: this answers a copy of the request sent again after the connection failed; the earlier copy may have been applied)"

// maxStatus bounds the Status body read to say so; a Status is small.
const maxStatus = 1 << 20

// selfDescribedCBOR (tag 55799) prefixes the API server's CBOR.
var selfDescribedCBOR = []byte{0xd9, 0xd9, 0xf7}

// sayMaybeApplied rewrites resp, a 404, 409 or 422 that refused a copy
// re-sent after an earlier one may have been applied (retry.MaybeApplied;
// the API server answers 422 to a JSON patch whose test fails), so that
// the caller's error says so: the Status keeps its code and reason, so
// apierrors.IsConflict, IsNotFound and IsInvalid still hold, and its
// message gets maybeAppliedNote. A body that is not a Status it can
// decode (JSON, protobuf or CBOR) is given back as it was.
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
		s.Message += maybeAppliedNote
		b, err := utiljson.Marshal(&s)
		return b, err == nil
	case "application/vnd.kubernetes.protobuf":
		// Read the envelope as Resendable does (protobufSerializer).
		var u runtime.Unknown
		if _, _, err := protobufSerializer.Decode(body, nil, &u); err != nil || u.Kind != "Status" || s.Unmarshal(u.Raw) != nil {
			return nil, false
		}
		s.Message += maybeAppliedNote
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
		s.Message += maybeAppliedNote
		b, err := direct.Marshal(&s)
		return append(append([]byte(nil), prefix...), b...), err == nil
	}
	return nil, false
}

// dryRun reports whether req is a dry run by its query (dryRunAll, as
// Resendable reads it): a refusal of its re-sent copy says nothing of an
// earlier copy, which applied nothing. A DELETE's body may also ask for
// one; that is not read here, and such a refusal still gets the note,
// which then overstates.
func dryRun(req *http.Request) bool {
	return req.URL != nil && dryRunAll(req.URL.Query()["dryRun"])
}

// errReader fails every read with err.
type errReader struct{ err error }

func (r errReader) Read([]byte) (int, error) { return 0, r.err }
