package kubeadapter_test

import (
	"bytes"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer/cbor"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/scheme"
	kjson "sigs.k8s.io/json"

	"github.com/kubewire/kubewire/kubeadapter"
)

// FuzzResendable: Resendable never panics, and whenever it reports true,
// a decode independent of its own shows the rule it relied on: JSON
// decoded whole with sigs.k8s.io/json into map[string]any (case-sensitive,
// the last of duplicate keys winning) and walked; protobuf and CBOR
// decoded into a ConfigMap or DeleteOptions by apimachinery's serializers,
// as the API server decodes them, where a failed decode means the server
// refuses the request, which is harmless.
func FuzzResendable(f *testing.F) {
	for _, c := range resendCases(f) {
		f.Add(c.method, c.path, c.contentType, c.body)
	}
	pb := protobuf.NewSerializer(scheme.Scheme, scheme.Scheme)
	cb := cbor.NewSerializer(scheme.Scheme, scheme.Scheme)
	configMapGVK := corev1.SchemeGroupVersion.WithKind("ConfigMap")
	deleteGVK := corev1.SchemeGroupVersion.WithKind("DeleteOptions")

	f.Fuzz(func(t *testing.T, method, target, contentType string, body []byte) {
		req, err := http.NewRequest(http.MethodPost, "https://api.invalid/", bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Method = method
		req.URL.Path, req.URL.RawQuery, _ = strings.Cut(target, "?")
		if contentType != "" {
			req.Header.Set("Content-Type", contentType)
		}
		if !kubeadapter.Resendable(req) {
			return
		}
		query := req.URL.Query()
		mt, _, _ := mime.ParseMediaType(contentType)
		if contentType == "" {
			mt = runtime.ContentTypeJSON
		}
		// decoded returns into decoded from a protobuf or CBOR body, or nil
		// when the API server refuses the body: it cannot decode it, or it
		// holds another kind, which the server fails to convert.
		decoded := func(gvk schema.GroupVersionKind, into runtime.Object) runtime.Object {
			var s runtime.Decoder = pb
			if mt == runtime.ContentTypeCBOR {
				s = cb
			}
			if obj, _, err := s.Decode(body, &gvk, into); err != nil || obj != into {
				return nil
			}
			return into
		}

		switch method {
		case "", http.MethodGet, http.MethodHead, http.MethodOptions:
		case http.MethodPost:
			if !refDryRun(query["dryRun"]) {
				t.Fatalf("POST without dryRun=All: %q", target)
			}
		case http.MethodPut:
			if refDryRun(query["dryRun"]) {
				return
			}
			switch mt {
			case runtime.ContentTypeJSON:
				if rv := refJSONString(refJSON(t, body), "metadata", "resourceVersion"); !refVersion(rv) {
					t.Fatalf("PUT with resourceVersion %q: %q", rv, body)
				}
			case runtime.ContentTypeProtobuf, runtime.ContentTypeCBOR:
				if obj := decoded(configMapGVK, &corev1.ConfigMap{}); obj != nil {
					m, err := meta.Accessor(obj)
					if err != nil {
						t.Fatal(err)
					}
					if !refVersion(m.GetResourceVersion()) {
						t.Fatalf("PUT %s decodes to resourceVersion %q: %x", mt, m.GetResourceVersion(), body)
					}
				}
			default:
				t.Fatalf("PUT with Content-Type %q", contentType)
			}
		case http.MethodPatch:
			if refDryRun(query["dryRun"]) {
				return
			}
			switch types.PatchType(mt) {
			case types.MergePatchType, types.StrategicMergePatchType:
				if rv := refJSONString(refJSON(t, body), "metadata", "resourceVersion"); !refVersion(rv) {
					t.Fatalf("merge patch with resourceVersion %q: %q", rv, body)
				}
			case types.JSONPatchType:
				if !refJSONPatch(refJSON(t, body)) {
					t.Fatalf("JSON patch without a test of the resourceVersion first: %q", body)
				}
			case types.ApplyYAMLPatchType, types.ApplyCBORPatchType:
				for _, v := range query["force"] {
					if v != "false" {
						t.Fatalf("apply with force=%q", v)
					}
				}
			default:
				t.Fatalf("PATCH with Content-Type %q", contentType)
			}
		case http.MethodDelete:
			if len(body) == 0 {
				if !refDryRun(query["dryRun"]) {
					t.Fatalf("DELETE without body or dryRun=All: %q", target)
				}
				return
			}
			switch mt {
			case runtime.ContentTypeJSON:
				v := refJSON(t, body)
				dry, _ := refJSONField(v, "dryRun").([]any)
				values := make([]string, len(dry))
				for i, d := range dry {
					values[i], _ = d.(string)
				}
				if !refDryRun(values) && refJSONString(v, "preconditions", "uid") == "" && refJSONString(v, "preconditions", "resourceVersion") == "" {
					t.Fatalf("DELETE without preconditions or dryRun: %q", body)
				}
			case runtime.ContentTypeProtobuf, runtime.ContentTypeCBOR:
				if obj := decoded(deleteGVK, &metav1.DeleteOptions{}); obj != nil {
					opts := obj.(*metav1.DeleteOptions)
					p := opts.Preconditions
					if !refDryRun(opts.DryRun) && (p == nil || (p.UID == nil || *p.UID == "") && (p.ResourceVersion == nil || *p.ResourceVersion == "")) {
						t.Fatalf("DELETE %s decodes to %+v: %x", mt, opts, body)
					}
				}
			default:
				t.Fatalf("DELETE with Content-Type %q", contentType)
			}
		default:
			t.Fatalf("method %q", method)
		}
	})
}

// refJSON decodes a body Resendable accepted; it must be JSON.
func refJSON(t *testing.T, body []byte) any {
	t.Helper()
	var v any
	if err := kjson.UnmarshalCaseSensitivePreserveInts(body, &v); err != nil {
		t.Fatalf("accepted a body that is not JSON: %v: %q", err, body)
	}
	return v
}

func refJSONField(v any, path ...string) any {
	for _, k := range path {
		m, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = m[k]
	}
	return v
}

func refJSONString(v any, path ...string) string {
	s, _ := refJSONField(v, path...).(string)
	return s
}

func refVersion(rv string) bool {
	n, err := strconv.ParseUint(rv, 10, 64)
	return err == nil && n > 0
}

func refDryRun(values []string) bool {
	if len(values) == 0 {
		return false
	}
	for _, v := range values {
		if v != "All" {
			return false
		}
	}
	return true
}

// refJSONPatch reports whether the operations test
// /metadata/resourceVersion against a non-empty string before any
// operation but a test.
func refJSONPatch(v any) bool {
	ops, _ := v.([]any)
	for _, op := range ops {
		if refJSONString(op, "op") != "test" {
			return false
		}
		if refJSONString(op, "path") == "/metadata/resourceVersion" && refJSONString(op, "value") != "" {
			return true
		}
	}
	return false
}
