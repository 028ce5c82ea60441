package kubeadapter

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"mime"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer/cbor/direct"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
	"k8s.io/apimachinery/pkg/types"
	kjson "sigs.k8s.io/json"

	"github.com/kubewire/kubewire/kubeadapter/internal/shared"
	"github.com/kubewire/kubewire/retry"
	"github.com/kubewire/kubewire/timeout"
)

// maxResendBody is the API server's limit on a request body
// (k8s.io/apiserver's Config.MaxRequestBodyBytes, 3 MiB by default).
const maxResendBody = 3 << 20

// Resendable reports whether req, a request to a Kubernetes API server
// that may have reached the server (its connection failed after it was
// sent), may be sent again because a second copy is harmless by the API
// server's own rules: it reads, it is a dry run, or it is a write whose own
// precondition makes the server refuse a second copy once the first took
// effect, or makes the second copy change nothing. It reports true for:
//
//   - GET, HEAD and OPTIONS (and "", which is GET). A protocol upgrade
//     never is, whatever its method: exec, attach and port-forward run
//     something.
//   - A request whose context is marked with retry.ContextWithIdempotent.
//     An Idempotency-Key or X-Idempotency-Key header does not count: the
//     API server ignores it.
//   - A POST, PUT or PATCH whose query has dryRun, every value of it "All".
//   - A PUT whose object's metadata.resourceVersion is a decimal number
//     above zero. The API server checks no other: an empty or zero
//     resourceVersion is an unconditional update.
//   - A JSON merge patch or strategic merge patch that sets
//     metadata.resourceVersion so, and, for a strategic merge patch, has no
//     directive at its top or in its metadata but $setElementOrder and
//     $deleteFromPrimitiveList ($patch: delete would drop it).
//   - A JSON patch that tests /metadata/resourceVersion against a non-empty
//     string before any operation other than a test.
//   - A server-side apply (application/apply-patch+yaml or +cbor) without
//     force: no force in the query, or every value of it exactly "false".
//     A second copy then changes nothing or fails with a conflict.
//   - A DELETE, of one object or of a collection, whose DeleteOptions body
//     has preconditions.uid or preconditions.resourceVersion set and not
//     empty, or dryRun ["All"]; or, without a body, dryRun=All in the
//     query. The API server ignores the query of a DELETE with a body.
//
// Everything else is false: POST above all, since a second create may make
// a second object (generateName) or fail after the first succeeded, and any
// unmarked write to an exec, attach, port-forward or proxy path
// (timeout.LongRunning), which reaches something other than the API
// server's storage. The caller's mark wins over the path: a request marked
// with retry.ContextWithIdempotent is re-sendable wherever it goes.
//
// Bodies are read through req.GetBody, never from req.Body, and decoded as
// the API server decodes them, by Content-Type (no Content-Type is JSON for
// a PUT or DELETE): JSON with case-sensitive keys, Kubernetes protobuf, and
// CBOR. It fails closed, reporting false, when a body it needs cannot be
// read or decoded: no GetBody, an error, a Content-Encoding, an unknown
// Content-Type, more than the API server's 3 MiB, a duplicate key (the API
// server keeps the last copy in one place and merges the copies in
// another), a CBOR map key that is tagged or not a string.
//
// A precondition does not stop a second copy from creating the object
// again when it was deleted in between: server-side apply creates it, and
// so does a PUT without metadata.uid to a resource that allows create on
// update (leases, services, endpoints, events, RBAC roles and bindings,
// limit ranges, runtime classes). Nor does apply without force stop a
// second copy from reverting what the same field manager (another replica)
// or a plain update changed in between. Either way the outcome is one a
// single copy arriving late would have had.
//
// Reads are decided by their method and cost nothing; a write's body is
// read and decoded on every call, so call it on a failure path. It does not
// modify req and is safe for concurrent use.
func Resendable(req *http.Request) bool {
	if req == nil || shared.IsUpgrade(req) {
		return false
	}
	switch req.Method {
	case "", http.MethodGet, http.MethodHead, http.MethodOptions:
		return true
	}
	if markedIdempotent(req) {
		return true
	}
	if req.URL == nil || timeout.LongRunning(req) {
		return false
	}
	// The API server reads its options from URL.Query, as here.
	query := req.URL.Query()
	switch req.Method {
	case http.MethodPost:
		return dryRunAll(query["dryRun"])
	case http.MethodPut:
		return dryRunAll(query["dryRun"]) || putResendable(req)
	case http.MethodPatch:
		return dryRunAll(query["dryRun"]) || patchResendable(req, query)
	case http.MethodDelete:
		return deleteResendable(req, query)
	}
	return false
}

// markedIdempotent reports whether req's context carries
// retry.ContextWithIdempotent's mark, asking retry.IsIdempotent about a
// copy that no method or header makes idempotent.
func markedIdempotent(req *http.Request) bool {
	r := *req
	r.Method = http.MethodPost
	r.Header = nil
	return retry.IsIdempotent(&r)
}

// dryRunAll reports whether values, those of the dryRun query parameter or
// of DeleteOptions.DryRun, make a dry run: the API server runs one for any
// value and refuses any but "All" (apimachinery's ValidateDryRun); only
// "All" counts here.
func dryRunAll(values []string) bool {
	for _, v := range values {
		if v != metav1.DryRunAll {
			return false
		}
	}
	return len(values) > 0
}

// versionPrecondition reports whether rv, the resourceVersion of a PUT or
// patched object, makes the API server compare it with the stored one: it
// does when rv parses as a number above zero, and updates unconditionally
// when it is empty or zero (k8s.io/apiserver's Store.Update and
// APIObjectVersioner.ObjectResourceVersion).
func versionPrecondition(rv string) bool {
	n, err := strconv.ParseUint(rv, 10, 64)
	return err == nil && n > 0
}

func putResendable(req *http.Request) bool {
	mt, ok := mediaType(req, runtime.ContentTypeJSON)
	if !ok {
		return false
	}
	body, ok := readBody(req)
	if !ok || len(body) == 0 {
		return false
	}
	switch mt {
	case runtime.ContentTypeJSON:
		meta, _, ok := jsonMetadata(body)
		return ok && versionPrecondition(jsonString(meta["resourceVersion"]))
	case runtime.ContentTypeProtobuf:
		raw, ok := protobufRaw(body)
		if !ok {
			return false
		}
		// Field 1 of every Kubernetes object is its ObjectMeta, which is
		// all PartialObjectMetadata has; the generated code skips the rest.
		var obj metav1.PartialObjectMetadata
		return obj.Unmarshal(raw) == nil && versionPrecondition(obj.ResourceVersion)
	case runtime.ContentTypeCBOR:
		rv, ok := cborResourceVersion(body)
		return ok && versionPrecondition(rv)
	}
	return false
}

func patchResendable(req *http.Request, query url.Values) bool {
	mt, ok := mediaType(req, "")
	if !ok {
		return false
	}
	switch pt := types.PatchType(mt); pt {
	case types.ApplyYAMLPatchType, types.ApplyCBORPatchType:
		// The API server reads the first value, and takes any but "0" or
		// "false" in any case for true (apimachinery's
		// Convert_Slice_string_To_Pointer_bool); only "false" counts here.
		for _, v := range query["force"] {
			if v != "false" {
				return false
			}
		}
		return true
	case types.MergePatchType, types.StrategicMergePatchType:
		body, ok := readBody(req)
		if !ok {
			return false
		}
		meta, top, ok := jsonMetadata(body)
		if !ok || pt == types.StrategicMergePatchType && (directive(top) || directive(meta)) {
			return false
		}
		return versionPrecondition(jsonString(meta["resourceVersion"]))
	case types.JSONPatchType:
		body, ok := readBody(req)
		return ok && testsResourceVersion(body)
	}
	return false
}

func deleteResendable(req *http.Request, query url.Values) bool {
	opts, ok := deleteOptions(req, query)
	if !ok {
		return false
	}
	if dryRunAll(opts.DryRun) {
		return true
	}
	p := opts.Preconditions
	return p != nil && (p.UID != nil && *p.UID != "" || p.ResourceVersion != nil && *p.ResourceVersion != "")
}

// deleteOptions returns the DeleteOptions of req, a DELETE, as the API
// server reads them: from the body when there is one, which makes it
// ignore the query, else from the query, where only dryRun counts here
// (preconditions cannot be given there). It reports false when the body
// cannot be read or decoded.
func deleteOptions(req *http.Request, query url.Values) (metav1.DeleteOptions, bool) {
	var opts metav1.DeleteOptions
	body, ok := readBody(req)
	if !ok {
		return opts, false
	}
	if len(body) == 0 {
		opts.DryRun = query["dryRun"]
		return opts, true
	}
	mt, ok := mediaType(req, runtime.ContentTypeJSON)
	if !ok {
		return opts, false
	}
	switch mt {
	case runtime.ContentTypeJSON:
		ok = decodeJSON(body, &opts)
	case runtime.ContentTypeProtobuf:
		var raw []byte
		raw, ok = protobufRaw(body)
		ok = ok && opts.Unmarshal(raw) == nil
	case runtime.ContentTypeCBOR:
		// The API server ignores fields it does not know; direct refuses
		// them, which fails closed.
		ok = direct.Unmarshal(body, &opts) == nil
	default:
		ok = false
	}
	return opts, ok
}

// mediaType returns the media type of req's Content-Type, lower case and
// without parameters, or def when there is none.
func mediaType(req *http.Request, def string) (string, bool) {
	ct := req.Header.Get("Content-Type")
	if ct == "" {
		return def, def != ""
	}
	mt, _, err := mime.ParseMediaType(ct)
	return mt, err == nil
}

// readBody returns a copy of req's body from req.GetBody, or reports false
// when it cannot: no GetBody, an error, a Content-Encoding, or more bytes
// than the API server accepts. A request without a body has an empty one.
func readBody(req *http.Request) ([]byte, bool) {
	if req.Body == nil || req.Body == http.NoBody {
		return nil, true
	}
	if req.GetBody == nil || len(req.Header.Values("Content-Encoding")) > 0 {
		return nil, false
	}
	rc, err := req.GetBody()
	if err != nil || rc == nil {
		return nil, false
	}
	defer rc.Close()
	body, err := io.ReadAll(io.LimitReader(rc, maxResendBody+1))
	if err != nil || len(body) > maxResendBody {
		return nil, false
	}
	return body, true
}

// decodeJSON decodes data into v as the API server's JSON decoder does
// (sigs.k8s.io/json: keys match case-sensitively), and reports false for
// an error or a duplicate key among those v decodes.
func decodeJSON(data []byte, v any) bool {
	strict, err := kjson.UnmarshalStrict(data, v, kjson.DisallowDuplicateFields)
	return err == nil && len(strict) == 0
}

// jsonMetadata decodes a JSON object and its metadata. A missing or null
// metadata is an empty one.
func jsonMetadata(data []byte) (meta, top map[string]json.RawMessage, ok bool) {
	if !decodeJSON(data, &top) {
		return nil, nil, false
	}
	if raw, found := top["metadata"]; found && !decodeJSON(raw, &meta) {
		return nil, nil, false
	}
	return meta, top, true
}

// jsonString returns the JSON string raw holds, or "" for anything else.
func jsonString(raw json.RawMessage) string {
	var s *string
	if raw == nil || !decodeJSON(raw, &s) || s == nil {
		return ""
	}
	return *s
}

// directive reports whether a strategic merge patch's map m has a
// directive that could drop or replace what the patch sets: anything
// beginning with "$" but the list directives $setElementOrder/<list> and
// $deleteFromPrimitiveList/<list> (apimachinery's strategicpatch).
func directive(m map[string]json.RawMessage) bool {
	for k := range m {
		if strings.HasPrefix(k, "$") &&
			!strings.HasPrefix(k, "$setElementOrder/") &&
			!strings.HasPrefix(k, "$deleteFromPrimitiveList/") {
			return true
		}
	}
	return false
}

// testsResourceVersion reports whether a JSON patch tests
// /metadata/resourceVersion against a non-empty string before any
// operation but a test. The API server applies the operations in order to
// the stored object (gopkg.in/evanphx/json-patch.v4) and re-applies them
// on a conflict, so the test fails once the object has changed; an
// operation before it could make it pass.
func testsResourceVersion(data []byte) bool {
	var ops []map[string]json.RawMessage
	if !decodeJSON(data, &ops) {
		return false
	}
	for _, op := range ops {
		if jsonString(op["op"]) != "test" {
			return false
		}
		if jsonString(op["path"]) == "/metadata/resourceVersion" && jsonString(op["value"]) != "" {
			return true
		}
	}
	return false
}

// protobufSerializer checks the "k8s\x00" prefix and decodes the
// runtime.Unknown envelope; decoding into a *runtime.Unknown needs no
// scheme.
var protobufSerializer = protobuf.NewSerializer(nil, nil)

// protobufRaw returns the encoded object inside a Kubernetes protobuf
// body, as the API server's protobuf serializer finds it.
func protobufRaw(body []byte) ([]byte, bool) {
	var unk runtime.Unknown
	if _, _, err := protobufSerializer.Decode(body, nil, &unk); err != nil {
		return nil, false
	}
	return unk.Raw, true
}

// cborResourceVersion returns metadata.resourceVersion of a CBOR object,
// decoded with apimachinery's CBOR options. Maps are decoded into
// map[cborKey]cborRaw because direct refuses fields a struct does not
// have, where the API server skips them; the string itself is decoded as
// the API server decodes it into ObjectMeta.
func cborResourceVersion(body []byte) (string, bool) {
	var top, meta map[cborKey]cborRaw
	if direct.Unmarshal(body, &top) != nil {
		return "", false
	}
	if raw, found := top["metadata"]; found && direct.Unmarshal(raw, &meta) != nil {
		return "", false
	}
	raw, found := meta["resourceVersion"]
	if !found {
		return "", true
	}
	var rv *string
	if direct.Unmarshal(raw, &rv) != nil {
		return "", false
	}
	if rv == nil {
		return "", true
	}
	return *rv, true
}

var errCBORKey = errors.New("kubeadapter: CBOR map key is not a byte or text string")

// cborKey is a CBOR map key that is a byte or text string (major type 2 or
// 3), which the API server matches with a struct field's name byte for
// byte; apimachinery's encoder writes every Go string as a byte string.
// Any other key, a tagged string among them, fails the decode.
type cborKey string

func (k *cborKey) UnmarshalCBOR(data []byte) error {
	if len(data) == 0 || data[0]>>5 != 2 && data[0]>>5 != 3 {
		return errCBORKey
	}
	var s string
	if err := direct.Unmarshal(data, &s); err != nil {
		return err
	}
	*k = cborKey(s)
	return nil
}

// cborRaw keeps a CBOR data item undecoded.
type cborRaw []byte

func (r *cborRaw) UnmarshalCBOR(data []byte) error {
	*r = bytes.Clone(data)
	return nil
}
