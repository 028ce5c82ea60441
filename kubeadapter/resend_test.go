package kubeadapter_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/runtime/serializer/cbor"
	"k8s.io/apimachinery/pkg/runtime/serializer/cbor/direct"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/scheme"

	"github.com/kubewire/kubewire/kubeadapter"
	"github.com/kubewire/kubewire/retry"
)

const (
	jsonCT    = runtime.ContentTypeJSON
	pbCT      = runtime.ContentTypeProtobuf
	cborCT    = runtime.ContentTypeCBOR
	mergeCT   = string(types.MergePatchType)
	smpCT     = string(types.StrategicMergePatchType)
	jsonPatCT = string(types.JSONPatchType)
	applyCT   = string(types.ApplyYAMLPatchType)
	applyCBOR = string(types.ApplyCBORPatchType)

	cmPath    = "/api/v1/namespaces/ns/configmaps/cm"
	cmsPath   = "/api/v1/namespaces/ns/configmaps"
	scalePath = "/apis/apps/v1/namespaces/ns/deployments/d/scale"
	maxBody   = 3 << 20
)

// clientGoCodecs are the codecs of client-go's generated clients with its
// ClientsAllowCBOR feature on (rest.CodecFactoryForGeneratedClient); off,
// they are scheme.Codecs, which encode JSON and protobuf the same way.
var clientGoCodecs = serializer.NewCodecFactory(scheme.Scheme, serializer.WithSerializer(cbor.NewSerializerInfo))

// encode returns the body client-go sends for obj with contentType, as
// rest.Request.Body encodes it for a typed client of gv.
func encode(tb testing.TB, contentType string, gv schema.GroupVersion, obj runtime.Object) []byte {
	tb.Helper()
	enc, err := runtime.NewClientNegotiator(clientGoCodecs.WithoutConversion(), gv).Encoder(contentType, nil)
	require.NoError(tb, err)
	b, err := runtime.Encode(enc, obj)
	require.NoError(tb, err)
	return b
}

func configMap(rv string) *corev1.ConfigMap {
	return &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "cm", Namespace: "ns", UID: "uid-1", ResourceVersion: rv},
		Data:       map[string]string{"k": "v"},
	}
}

// cborOf encodes v with apimachinery's CBOR options.
func cborOf(tb testing.TB, v any) []byte {
	tb.Helper()
	b, err := direct.Marshal(v)
	require.NoError(tb, err)
	return b
}

// resendCase is a request for Resendable; the fuzz test seeds from them.
type resendCase struct {
	name        string
	method      string
	path        string // and query
	contentType string
	body        []byte // nil: no body
	header      http.Header
	marked      bool // context marked with retry.ContextWithIdempotent
	noGetBody   bool
	want        bool
}

// request builds c's request as client-go's rest.Request does: the body
// from a bytes.Reader, so net/http sets GetBody.
func (c resendCase) request(tb testing.TB) *http.Request {
	tb.Helper()
	ctx := context.Background()
	if c.marked {
		ctx = retry.ContextWithIdempotent(ctx)
	}
	var body io.Reader
	if c.body != nil {
		body = bytes.NewReader(c.body)
	}
	req, err := http.NewRequestWithContext(ctx, c.method, "https://api.invalid"+c.path, body)
	require.NoError(tb, err)
	req.Method = c.method // keeps ""
	for k, vs := range c.header {
		req.Header[k] = vs
	}
	if c.contentType != "" {
		req.Header.Set("Content-Type", c.contentType)
	}
	if c.noGetBody {
		req.GetBody = nil
	}
	return req
}

func resendCases(tb testing.TB) []resendCase {
	gvV1 := corev1.SchemeGroupVersion
	delUID := func(uid types.UID) *metav1.DeleteOptions {
		return &metav1.DeleteOptions{Preconditions: metav1.NewUIDPreconditions(string(uid))}
	}
	delRV := func(rv string) *metav1.DeleteOptions { return metav1.NewRVDeletionPrecondition(rv) }
	dryRun := &metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}}
	pbCM := encode(tb, pbCT, gvV1, configMap("5"))
	cborCM := encode(tb, cborCT, gvV1, configMap("5"))
	rvJSON := []byte(`{"metadata":{"resourceVersion":"5"}}`)

	// A body of exactly the API server's limit, and one byte more.
	pad := func(n int) []byte {
		prefix, suffix := `{"metadata":{"resourceVersion":"5"},"data":{"k":"`, `"}}`
		return []byte(prefix + strings.Repeat("x", n-len(prefix)-len(suffix)) + suffix)
	}
	// CBOR the encoder does not write. It writes every Go string as a
	// byte string (0x40 | length); these use text strings (0x60 | length)
	// and tags.
	text := func(s string) []byte { return append([]byte{0x60 | byte(len(s))}, s...) }
	cat := func(parts ...[]byte) []byte { return bytes.Join(parts, nil) }
	cborText := cat([]byte{0xa1}, text("metadata"), []byte{0xa1}, text("resourceVersion"), text("5"))
	cborDup := cat([]byte{0xa2}, cborOf(tb, "metadata"), cborOf(tb, map[string]string{"resourceVersion": "5"}),
		cborOf(tb, "metadata"), cborOf(tb, map[string]string{}))
	// Tag 22 (expected base64) around the key "metadata".
	cborTaggedKey := cat([]byte{0xa1, 0xd6}, cborOf(tb, "metadata"), cborOf(tb, map[string]string{"resourceVersion": "5"}))
	// Tag 23 (expected base16) around the resourceVersion "1": the API
	// server decodes it into the string "31".
	cborTaggedRV := cat([]byte{0xa1}, cborOf(tb, "metadata"), []byte{0xa1}, cborOf(tb, "resourceVersion"), []byte{0xd7}, cborOf(tb, "1"))

	return []resendCase{
		// Reads.
		{name: "GET", method: http.MethodGet, path: cmPath, want: true},
		{name: "empty method is GET", method: "", path: cmPath, want: true},
		{name: "HEAD", method: http.MethodHead, path: cmPath, want: true},
		{name: "OPTIONS", method: http.MethodOptions, path: cmPath, want: true},
		{name: "GET exec over WebSocket", method: http.MethodGet, path: "/api/v1/namespaces/ns/pods/p/exec?command=rm",
			header: http.Header{"Connection": {"Upgrade"}, "Upgrade": {"websocket"}}},
		{name: "TRACE", method: http.MethodTrace, path: cmPath},

		// The mark, and headers the API server ignores.
		{name: "POST marked", method: http.MethodPost, path: cmsPath, contentType: jsonCT, body: []byte(`{}`), marked: true, want: true},
		{name: "PATCH marked", method: http.MethodPatch, path: cmPath, contentType: mergeCT, body: []byte(`{}`), marked: true, want: true},
		{name: "POST Idempotency-Key", method: http.MethodPost, path: cmsPath, contentType: jsonCT, body: []byte(`{}`),
			header: http.Header{"Idempotency-Key": {"k"}}},
		{name: "POST X-Idempotency-Key", method: http.MethodPost, path: cmsPath, contentType: jsonCT, body: []byte(`{}`),
			header: http.Header{"X-Idempotency-Key": {"k"}}},

		// POST.
		{name: "POST create JSON", method: http.MethodPost, path: cmsPath, contentType: jsonCT, body: encode(tb, jsonCT, gvV1, configMap(""))},
		{name: "POST create protobuf", method: http.MethodPost, path: cmsPath, contentType: pbCT, body: encode(tb, pbCT, gvV1, configMap(""))},
		{name: "POST create with a resourceVersion", method: http.MethodPost, path: cmsPath, contentType: jsonCT, body: rvJSON},

		// dryRun.
		{name: "POST dryRun=All", method: http.MethodPost, path: cmsPath + "?dryRun=All", contentType: jsonCT, body: []byte(`{}`), want: true},
		{name: "POST dryRun=All twice", method: http.MethodPost, path: cmsPath + "?dryRun=All&dryRun=All", contentType: jsonCT, body: []byte(`{}`), want: true},
		{name: "POST dryRun=all", method: http.MethodPost, path: cmsPath + "?dryRun=all", contentType: jsonCT, body: []byte(`{}`)},
		{name: "POST dryRun=", method: http.MethodPost, path: cmsPath + "?dryRun=", contentType: jsonCT, body: []byte(`{}`)},
		{name: "POST dryRun=All and another", method: http.MethodPost, path: cmsPath + "?dryRun=All&dryRun=x", contentType: jsonCT, body: []byte(`{}`)},
		{name: "POST DryRun=All", method: http.MethodPost, path: cmsPath + "?DryRun=All", contentType: jsonCT, body: []byte(`{}`)},
		{name: "POST exec dryRun=All", method: http.MethodPost, path: "/api/v1/namespaces/ns/pods/p/exec?dryRun=All&command=rm"},
		{name: "POST service proxy dryRun=All", method: http.MethodPost, path: "/api/v1/namespaces/ns/services/s/proxy/x?dryRun=All", contentType: jsonCT, body: []byte(`{}`)},
		{name: "PUT service proxy with a resourceVersion", method: http.MethodPut, path: "/api/v1/namespaces/ns/services/s:80/proxy/x", contentType: jsonCT, body: rvJSON},
		{name: "PUT dryRun=All", method: http.MethodPut, path: cmPath + "?dryRun=All", contentType: jsonCT, body: []byte(`{}`), want: true},
		{name: "PATCH dryRun=All", method: http.MethodPatch, path: cmPath + "?dryRun=All", contentType: mergeCT, body: []byte(`{}`), want: true},
		{name: "apply force=true dryRun=All", method: http.MethodPatch, path: cmPath + "?dryRun=All&force=true", contentType: applyCT, body: []byte(`{}`), want: true},
		{name: "DELETE dryRun=All without body", method: http.MethodDelete, path: cmPath + "?dryRun=All", want: true},
		{name: "DELETE dryRun=All with a body (ignored)", method: http.MethodDelete, path: cmPath + "?dryRun=All", contentType: jsonCT,
			body: encode(tb, jsonCT, gvV1, &metav1.DeleteOptions{})},
		{name: "DELETE body dryRun All", method: http.MethodDelete, path: cmPath, contentType: jsonCT, body: encode(tb, jsonCT, gvV1, dryRun), want: true},
		{name: "DELETE body dryRun All protobuf", method: http.MethodDelete, path: cmPath, contentType: pbCT, body: encode(tb, pbCT, gvV1, dryRun), want: true},

		// PUT, JSON.
		{name: "PUT JSON", method: http.MethodPut, path: cmPath, contentType: jsonCT, body: encode(tb, jsonCT, gvV1, configMap("5")), want: true},
		{name: "PUT JSON without resourceVersion", method: http.MethodPut, path: cmPath, contentType: jsonCT, body: encode(tb, jsonCT, gvV1, configMap(""))},
		{name: "PUT JSON charset", method: http.MethodPut, path: cmPath, contentType: jsonCT + "; charset=utf-8", body: rvJSON, want: true},
		{name: "PUT no Content-Type is JSON", method: http.MethodPut, path: cmPath, body: rvJSON, want: true},
		{name: "PUT JSON resourceVersion empty", method: http.MethodPut, path: cmPath, contentType: jsonCT, body: []byte(`{"metadata":{"resourceVersion":""}}`)},
		{name: "PUT JSON resourceVersion null", method: http.MethodPut, path: cmPath, contentType: jsonCT, body: []byte(`{"metadata":{"resourceVersion":null}}`)},
		{name: "PUT JSON resourceVersion number", method: http.MethodPut, path: cmPath, contentType: jsonCT, body: []byte(`{"metadata":{"resourceVersion":5}}`)},
		{name: "PUT JSON resourceVersion 0", method: http.MethodPut, path: cmPath, contentType: jsonCT, body: []byte(`{"metadata":{"resourceVersion":"0"}}`)},
		{name: "PUT JSON resourceVersion 00", method: http.MethodPut, path: cmPath, contentType: jsonCT, body: []byte(`{"metadata":{"resourceVersion":"00"}}`)},
		{name: "PUT JSON resourceVersion not a number", method: http.MethodPut, path: cmPath, contentType: jsonCT, body: []byte(`{"metadata":{"resourceVersion":"abc"}}`)},
		{name: "PUT JSON escaped key", method: http.MethodPut, path: cmPath, contentType: jsonCT, body: []byte(`{"metadata":{"resource\u0056ersion":"5"}}`), want: true},
		{name: "PUT JSON ResourceVersion", method: http.MethodPut, path: cmPath, contentType: jsonCT, body: []byte(`{"metadata":{"ResourceVersion":"5"}}`)},
		{name: "PUT JSON Metadata", method: http.MethodPut, path: cmPath, contentType: jsonCT, body: []byte(`{"Metadata":{"resourceVersion":"5"}}`)},
		{name: "PUT JSON metadata null", method: http.MethodPut, path: cmPath, contentType: jsonCT, body: []byte(`{"metadata":null}`)},
		{name: "PUT JSON duplicate metadata", method: http.MethodPut, path: cmPath, contentType: jsonCT,
			body: []byte(`{"metadata":{"resourceVersion":"5"},"metadata":{"name":"cm"}}`)},
		{name: "PUT JSON duplicate resourceVersion", method: http.MethodPut, path: cmPath, contentType: jsonCT,
			body: []byte(`{"metadata":{"resourceVersion":"5","resourceVersion":""}}`)},
		{name: "PUT JSON array", method: http.MethodPut, path: cmPath, contentType: jsonCT, body: []byte(`[{"metadata":{"resourceVersion":"5"}}]`)},
		{name: "PUT JSON truncated", method: http.MethodPut, path: cmPath, contentType: jsonCT, body: rvJSON[:len(rvJSON)-1]},
		{name: "PUT JSON trailing garbage", method: http.MethodPut, path: cmPath, contentType: jsonCT, body: append(bytes.Clone(rvJSON), " x"...)},
		{name: "PUT empty body", method: http.MethodPut, path: cmPath, contentType: jsonCT, body: []byte{}},
		{name: "PUT YAML", method: http.MethodPut, path: cmPath, contentType: "application/yaml", body: []byte("metadata:\n  resourceVersion: \"5\"\n")},
		{name: "PUT text/plain", method: http.MethodPut, path: cmPath, contentType: "text/plain", body: rvJSON},
		{name: "PUT bad Content-Type", method: http.MethodPut, path: cmPath, contentType: "application/json; charset", body: rvJSON},
		{name: "PUT gzip", method: http.MethodPut, path: cmPath, contentType: jsonCT, body: rvJSON, header: http.Header{"Content-Encoding": {"gzip"}}},
		{name: "PUT no GetBody", method: http.MethodPut, path: cmPath, contentType: jsonCT, body: rvJSON, noGetBody: true},
		{name: "PUT body at the limit", method: http.MethodPut, path: cmPath, contentType: jsonCT, body: pad(maxBody), want: true},
		{name: "PUT body over the limit", method: http.MethodPut, path: cmPath, contentType: jsonCT, body: pad(maxBody + 1)},

		// PUT, protobuf.
		{name: "PUT protobuf", method: http.MethodPut, path: cmPath, contentType: pbCT, body: pbCM, want: true},
		{name: "PUT protobuf without resourceVersion", method: http.MethodPut, path: cmPath, contentType: pbCT, body: encode(tb, pbCT, gvV1, configMap(""))},
		{name: "PUT protobuf resourceVersion 0", method: http.MethodPut, path: cmPath, contentType: pbCT, body: encode(tb, pbCT, gvV1, configMap("0"))},
		{name: "PUT protobuf scale", method: http.MethodPut, path: scalePath, contentType: pbCT, want: true,
			body: encode(tb, pbCT, autoscalingv1.SchemeGroupVersion, &autoscalingv1.Scale{
				ObjectMeta: metav1.ObjectMeta{Name: "d", Namespace: "ns", ResourceVersion: "7"},
				Spec:       autoscalingv1.ScaleSpec{Replicas: 3},
			})},
		{name: "PUT protobuf truncated", method: http.MethodPut, path: cmPath, contentType: pbCT, body: pbCM[:len(pbCM)-3]},
		{name: "PUT protobuf wrong magic", method: http.MethodPut, path: cmPath, contentType: pbCT, body: append([]byte("k8s\x01"), pbCM[4:]...)},
		{name: "PUT protobuf magic only", method: http.MethodPut, path: cmPath, contentType: pbCT, body: pbCM[:4]},
		{name: "PUT protobuf without magic", method: http.MethodPut, path: cmPath, contentType: pbCT, body: pbCM[4:]},
		{name: "PUT JSON sent as protobuf", method: http.MethodPut, path: cmPath, contentType: pbCT, body: rvJSON},
		{name: "PUT protobuf sent as JSON", method: http.MethodPut, path: cmPath, contentType: jsonCT, body: pbCM},

		// PUT, CBOR.
		{name: "PUT CBOR", method: http.MethodPut, path: cmPath, contentType: cborCT, body: cborCM, want: true},
		{name: "PUT CBOR without self-described tag", method: http.MethodPut, path: cmPath, contentType: cborCT, body: cborCM[3:], want: true},
		{name: "PUT CBOR without resourceVersion", method: http.MethodPut, path: cmPath, contentType: cborCT, body: encode(tb, cborCT, gvV1, configMap(""))},
		{name: "PUT CBOR truncated", method: http.MethodPut, path: cmPath, contentType: cborCT, body: cborCM[:len(cborCM)-1]},
		{name: "PUT CBOR ResourceVersion", method: http.MethodPut, path: cmPath, contentType: cborCT,
			body: cborOf(tb, map[string]any{"metadata": map[string]string{"ResourceVersion": "5"}})},
		{name: "PUT CBOR resourceVersion number", method: http.MethodPut, path: cmPath, contentType: cborCT,
			body: cborOf(tb, map[string]any{"metadata": map[string]int{"resourceVersion": 5}})},
		{name: "PUT CBOR resourceVersion null", method: http.MethodPut, path: cmPath, contentType: cborCT,
			body: cborOf(tb, map[string]any{"metadata": map[string]any{"resourceVersion": nil}})},
		{name: "PUT CBOR duplicate metadata", method: http.MethodPut, path: cmPath, contentType: cborCT, body: cborDup},
		{name: "PUT CBOR text strings", method: http.MethodPut, path: cmPath, contentType: cborCT, body: cborText, want: true},
		{name: "PUT CBOR tagged key", method: http.MethodPut, path: cmPath, contentType: cborCT, body: cborTaggedKey},
		{name: "PUT CBOR tagged resourceVersion", method: http.MethodPut, path: cmPath, contentType: cborCT, body: cborTaggedRV, want: true},
		{name: "PUT JSON sent as CBOR", method: http.MethodPut, path: cmPath, contentType: cborCT, body: rvJSON},

		// PATCH, merge patches.
		{name: "merge patch", method: http.MethodPatch, path: cmPath, contentType: mergeCT, body: rvJSON, want: true},
		{name: "merge patch charset", method: http.MethodPatch, path: cmPath, contentType: mergeCT + "; charset=utf-8", body: rvJSON, want: true},
		{name: "merge patch without resourceVersion", method: http.MethodPatch, path: cmPath, contentType: mergeCT, body: []byte(`{"data":{"k":"v"}}`)},
		{name: "merge patch resourceVersion null", method: http.MethodPatch, path: cmPath, contentType: mergeCT, body: []byte(`{"metadata":{"resourceVersion":null}}`)},
		{name: "merge patch resourceVersion empty", method: http.MethodPatch, path: cmPath, contentType: mergeCT, body: []byte(`{"metadata":{"resourceVersion":""}}`)},
		{name: "merge patch resourceVersion number", method: http.MethodPatch, path: cmPath, contentType: mergeCT, body: []byte(`{"metadata":{"resourceVersion":5}}`)},
		{name: "merge patch ResourceVersion", method: http.MethodPatch, path: cmPath, contentType: mergeCT, body: []byte(`{"metadata":{"ResourceVersion":"5"}}`)},
		{name: "merge patch Metadata", method: http.MethodPatch, path: cmPath, contentType: mergeCT, body: []byte(`{"Metadata":{"resourceVersion":"5"}}`)},
		{name: "merge patch duplicate metadata", method: http.MethodPatch, path: cmPath, contentType: mergeCT,
			body: []byte(`{"metadata":{"resourceVersion":"5"},"metadata":{"labels":{"a":"b"}}}`)},
		{name: "merge patch $patch is a field", method: http.MethodPatch, path: cmPath, contentType: mergeCT,
			body: []byte(`{"$patch":"replace","metadata":{"resourceVersion":"5"}}`), want: true},
		{name: "merge patch no GetBody", method: http.MethodPatch, path: cmPath, contentType: mergeCT, body: rvJSON, noGetBody: true},
		{name: "merge patch gzip", method: http.MethodPatch, path: cmPath, contentType: mergeCT, body: rvJSON, header: http.Header{"Content-Encoding": {"gzip"}}},
		{name: "strategic merge patch", method: http.MethodPatch, path: cmPath, contentType: smpCT, body: rvJSON, want: true},
		{name: "strategic merge patch list directive", method: http.MethodPatch, path: cmPath, contentType: smpCT, want: true,
			body: []byte(`{"metadata":{"resourceVersion":"5","$deleteFromPrimitiveList/finalizers":["f"],"$setElementOrder/finalizers":["g"]}}`)},
		{name: "strategic merge patch $patch delete", method: http.MethodPatch, path: cmPath, contentType: smpCT,
			body: []byte(`{"metadata":{"resourceVersion":"5","$patch":"delete"}}`)},
		{name: "strategic merge patch top $patch", method: http.MethodPatch, path: cmPath, contentType: smpCT,
			body: []byte(`{"$patch":"replace","metadata":{"resourceVersion":"5"}}`)},
		{name: "strategic merge patch $retainKeys", method: http.MethodPatch, path: cmPath, contentType: smpCT,
			body: []byte(`{"$retainKeys":["data"],"metadata":{"resourceVersion":"5"}}`)},
		{name: "strategic merge patch without resourceVersion", method: http.MethodPatch, path: cmPath, contentType: smpCT, body: []byte(`{"data":{"k":"v"}}`)},

		// PATCH, JSON patches.
		{name: "JSON patch test first", method: http.MethodPatch, path: cmPath, contentType: jsonPatCT, want: true,
			body: []byte(`[{"op":"test","path":"/metadata/resourceVersion","value":"5"},{"op":"replace","path":"/data/k","value":"w"}]`)},
		{name: "JSON patch other tests first", method: http.MethodPatch, path: cmPath, contentType: jsonPatCT, want: true,
			body: []byte(`[{"op":"test","path":"/metadata/name","value":"cm"},{"op":"test","path":"/metadata/resourceVersion","value":"5"},{"op":"remove","path":"/data/k"}]`)},
		{name: "JSON patch replace before test", method: http.MethodPatch, path: cmPath, contentType: jsonPatCT,
			body: []byte(`[{"op":"replace","path":"/metadata/resourceVersion","value":"5"},{"op":"test","path":"/metadata/resourceVersion","value":"5"}]`)},
		{name: "JSON patch add before test", method: http.MethodPatch, path: cmPath, contentType: jsonPatCT,
			body: []byte(`[{"op":"add","path":"/data/x","value":"y"},{"op":"test","path":"/metadata/resourceVersion","value":"5"}]`)},
		{name: "JSON patch test of another path", method: http.MethodPatch, path: cmPath, contentType: jsonPatCT,
			body: []byte(`[{"op":"test","path":"/metadata/name","value":"cm"},{"op":"replace","path":"/data/k","value":"w"}]`)},
		{name: "JSON patch test ResourceVersion", method: http.MethodPatch, path: cmPath, contentType: jsonPatCT,
			body: []byte(`[{"op":"test","path":"/metadata/ResourceVersion","value":"5"}]`)},
		{name: "JSON patch test empty", method: http.MethodPatch, path: cmPath, contentType: jsonPatCT,
			body: []byte(`[{"op":"test","path":"/metadata/resourceVersion","value":""}]`)},
		{name: "JSON patch test number", method: http.MethodPatch, path: cmPath, contentType: jsonPatCT,
			body: []byte(`[{"op":"test","path":"/metadata/resourceVersion","value":5}]`)},
		{name: "JSON patch test without value", method: http.MethodPatch, path: cmPath, contentType: jsonPatCT,
			body: []byte(`[{"op":"test","path":"/metadata/resourceVersion"}]`)},
		{name: "JSON patch Op", method: http.MethodPatch, path: cmPath, contentType: jsonPatCT,
			body: []byte(`[{"Op":"test","path":"/metadata/resourceVersion","value":"5"}]`)},
		{name: "JSON patch duplicate op", method: http.MethodPatch, path: cmPath, contentType: jsonPatCT,
			body: []byte(`[{"op":"test","path":"/metadata/resourceVersion","value":"5","op":"replace"}]`)},
		{name: "JSON patch empty", method: http.MethodPatch, path: cmPath, contentType: jsonPatCT, body: []byte(`[]`)},
		{name: "JSON patch object", method: http.MethodPatch, path: cmPath, contentType: jsonPatCT, body: rvJSON},

		// PATCH, server-side apply.
		{name: "apply", method: http.MethodPatch, path: cmPath + "?fieldManager=m", contentType: applyCT, body: []byte("data:\n  k: v\n"), want: true},
		{name: "apply force=false", method: http.MethodPatch, path: cmPath + "?fieldManager=m&force=false", contentType: applyCT, body: []byte("{}"), want: true},
		{name: "apply force=true", method: http.MethodPatch, path: cmPath + "?fieldManager=m&force=true", contentType: applyCT, body: []byte("{}")},
		{name: "apply force=TRUE", method: http.MethodPatch, path: cmPath + "?force=TRUE", contentType: applyCT, body: []byte("{}")},
		{name: "apply force=1", method: http.MethodPatch, path: cmPath + "?force=1", contentType: applyCT, body: []byte("{}")},
		{name: "apply force=", method: http.MethodPatch, path: cmPath + "?force=", contentType: applyCT, body: []byte("{}")},
		{name: "apply force", method: http.MethodPatch, path: cmPath + "?force", contentType: applyCT, body: []byte("{}")},
		{name: "apply force=False", method: http.MethodPatch, path: cmPath + "?force=False", contentType: applyCT, body: []byte("{}")},
		{name: "apply force=false then true", method: http.MethodPatch, path: cmPath + "?force=false&force=true", contentType: applyCT, body: []byte("{}")},
		{name: "apply CBOR", method: http.MethodPatch, path: cmPath + "?fieldManager=m", contentType: applyCBOR, body: cborOf(tb, map[string]any{}), want: true},
		{name: "apply CBOR force=true", method: http.MethodPatch, path: cmPath + "?force=true", contentType: applyCBOR, body: cborOf(tb, map[string]any{})},

		// PATCH, other types.
		{name: "PATCH JSON", method: http.MethodPatch, path: cmPath, contentType: jsonCT, body: rvJSON},
		{name: "PATCH no Content-Type", method: http.MethodPatch, path: cmPath, body: rvJSON},

		// DELETE.
		{name: "DELETE without body", method: http.MethodDelete, path: cmPath},
		{name: "DELETE empty options", method: http.MethodDelete, path: cmPath, contentType: jsonCT, body: encode(tb, jsonCT, gvV1, &metav1.DeleteOptions{})},
		{name: "DELETE uid", method: http.MethodDelete, path: cmPath, contentType: jsonCT, body: encode(tb, jsonCT, gvV1, delUID("uid-1")), want: true},
		{name: "DELETE resourceVersion", method: http.MethodDelete, path: cmPath, contentType: jsonCT, body: encode(tb, jsonCT, gvV1, delRV("5")), want: true},
		{name: "DELETE no Content-Type is JSON", method: http.MethodDelete, path: cmPath, body: []byte(`{"preconditions":{"uid":"u"}}`), want: true},
		{name: "DELETE uid empty", method: http.MethodDelete, path: cmPath, contentType: jsonCT, body: encode(tb, jsonCT, gvV1, delUID(""))},
		{name: "DELETE preconditions empty", method: http.MethodDelete, path: cmPath, contentType: jsonCT, body: []byte(`{"preconditions":{}}`)},
		{name: "DELETE preconditions null", method: http.MethodDelete, path: cmPath, contentType: jsonCT, body: []byte(`{"preconditions":null}`)},
		{name: "DELETE Preconditions", method: http.MethodDelete, path: cmPath, contentType: jsonCT, body: []byte(`{"Preconditions":{"uid":"u"}}`)},
		{name: "DELETE UID", method: http.MethodDelete, path: cmPath, contentType: jsonCT, body: []byte(`{"preconditions":{"UID":"u"}}`)},
		{name: "DELETE uid number", method: http.MethodDelete, path: cmPath, contentType: jsonCT, body: []byte(`{"preconditions":{"uid":5}}`)},
		{name: "DELETE duplicate preconditions", method: http.MethodDelete, path: cmPath, contentType: jsonCT,
			body: []byte(`{"preconditions":{"uid":"u"},"preconditions":{}}`)},
		{name: "DELETE duplicate uid", method: http.MethodDelete, path: cmPath, contentType: jsonCT, body: []byte(`{"preconditions":{"uid":"u","uid":""}}`)},
		{name: "DELETE protobuf uid", method: http.MethodDelete, path: cmPath, contentType: pbCT, body: encode(tb, pbCT, gvV1, delUID("uid-1")), want: true},
		{name: "DELETE protobuf resourceVersion", method: http.MethodDelete, path: cmPath, contentType: pbCT, body: encode(tb, pbCT, gvV1, delRV("5")), want: true},
		{name: "DELETE protobuf without preconditions", method: http.MethodDelete, path: cmPath, contentType: pbCT, body: encode(tb, pbCT, gvV1, &metav1.DeleteOptions{})},
		{name: "DELETE protobuf truncated", method: http.MethodDelete, path: cmPath, contentType: pbCT,
			body: func() []byte { b := encode(tb, pbCT, gvV1, delUID("uid-1")); return b[:len(b)-8] }()},
		{name: "DELETE CBOR resourceVersion", method: http.MethodDelete, path: cmPath, contentType: cborCT, body: encode(tb, cborCT, gvV1, delRV("5")), want: true},
		{name: "DELETE CBOR without preconditions", method: http.MethodDelete, path: cmPath, contentType: cborCT, body: encode(tb, cborCT, gvV1, &metav1.DeleteOptions{})},
		{name: "DELETE CBOR Preconditions", method: http.MethodDelete, path: cmPath, contentType: cborCT,
			body: cborOf(tb, map[string]any{"Preconditions": map[string]string{"uid": "u"}})},
		{name: "DELETE gzip", method: http.MethodDelete, path: cmPath, contentType: jsonCT, body: encode(tb, jsonCT, gvV1, delUID("uid-1")),
			header: http.Header{"Content-Encoding": {"gzip"}}},
		{name: "DELETE no GetBody", method: http.MethodDelete, path: cmPath, contentType: jsonCT, body: encode(tb, jsonCT, gvV1, delUID("uid-1")), noGetBody: true},
		{name: "DELETE YAML", method: http.MethodDelete, path: cmPath, contentType: "application/yaml", body: []byte("preconditions:\n  uid: u\n")},
		{name: "deletecollection with preconditions", method: http.MethodDelete, path: cmsPath + "?labelSelector=a%3Db", contentType: jsonCT,
			body: encode(tb, jsonCT, gvV1, delUID("uid-1")), want: true},
		{name: "deletecollection", method: http.MethodDelete, path: cmsPath + "?labelSelector=a%3Db", contentType: jsonCT,
			body: encode(tb, jsonCT, gvV1, &metav1.DeleteOptions{})},
		{name: "deletecollection without body", method: http.MethodDelete, path: cmsPath},
	}
}

func TestResendable(t *testing.T) {
	for _, tt := range resendCases(t) {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, kubeadapter.Resendable(tt.request(t)))
		})
	}
	assert.False(t, kubeadapter.Resendable(nil))
}

// TestResendableWireFormats pins down the framing of what client-go
// sends, which Resendable decodes: protobuf bodies begin with "k8s\x00"
// (apimachinery's protobuf.protoEncodingPrefix), CBOR bodies with the
// self-described CBOR tag 55799 (cbor.selfDescribedCBOR).
func TestResendableWireFormats(t *testing.T) {
	assert.True(t, bytes.HasPrefix(encode(t, pbCT, corev1.SchemeGroupVersion, configMap("5")), []byte("k8s\x00")))
	assert.True(t, bytes.HasPrefix(encode(t, cborCT, corev1.SchemeGroupVersion, configMap("5")), []byte{0xd9, 0xd9, 0xf7}))
}

// TestResendableLeavesRequest: Resendable reads the body through GetBody,
// closes what GetBody returned, and leaves the request as it was.
func TestResendableLeavesRequest(t *testing.T) {
	body := []byte(`{"metadata":{"resourceVersion":"5"}}`)
	req, err := http.NewRequest(http.MethodPut, "https://api.invalid"+cmPath, bytes.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Content-Type", jsonCT)
	getBody := req.GetBody
	var opened, closed int
	req.GetBody = func() (io.ReadCloser, error) {
		opened++
		rc, err := getBody()
		return &closeCounter{ReadCloser: rc, closed: &closed}, err
	}
	header := req.Header.Clone()

	require.True(t, kubeadapter.Resendable(req))
	assert.Equal(t, 1, opened)
	assert.Equal(t, 1, closed)
	assert.Equal(t, http.MethodPut, req.Method)
	assert.Equal(t, header, req.Header)
	got, err := io.ReadAll(req.Body)
	require.NoError(t, err)
	assert.Equal(t, body, got, "req.Body was read")
}

type closeCounter struct {
	io.ReadCloser
	closed *int
}

func (c *closeCounter) Close() error {
	*c.closed++
	return c.ReadCloser.Close()
}

// TestResendableReadsFree: a read is decided by its method, without its
// body and without allocating.
func TestResendableReadsFree(t *testing.T) {
	req, err := http.NewRequest(http.MethodGet, "https://api.invalid"+cmPath+"?watch=true", strings.NewReader("x"))
	require.NoError(t, err)
	req.GetBody = func() (io.ReadCloser, error) {
		t.Error("GetBody called for a GET")
		return nil, errors.New("unexpected")
	}
	assert.True(t, kubeadapter.Resendable(req))
	assert.Zero(t, testing.AllocsPerRun(100, func() { kubeadapter.Resendable(req) }))
}

func TestResendableGetBodyError(t *testing.T) {
	req, err := http.NewRequest(http.MethodPut, "https://api.invalid"+cmPath, strings.NewReader(`{"metadata":{"resourceVersion":"5"}}`))
	require.NoError(t, err)
	req.GetBody = func() (io.ReadCloser, error) { return nil, errors.New("gone") }
	assert.False(t, kubeadapter.Resendable(req))
}
