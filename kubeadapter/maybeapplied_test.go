package kubeadapter_test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	cborserializer "k8s.io/apimachinery/pkg/runtime/serializer/cbor"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"

	"github.com/kubewire/kubewire/kubeadapter"
	"github.com/kubewire/kubewire/transport"
	"github.com/kubewire/kubewire/transport/transporttest"
)

// TestMaybeAppliedMessage: an update guarded by its resourceVersion whose
// answer is lost after the server applied it is sent again, and the server
// refuses the second copy with a Status in the encoding the client asked
// for (JSON, protobuf or CBOR). The caller, client-go's REST client,
// gets the Status' code and reason (apierrors.IsConflict, IsNotFound,
// IsInvalid),
// and a message that says the earlier copy may have been applied. A
// refusal of a first copy says nothing of the kind.
func TestMaybeAppliedMessage(t *testing.T) {
	scheme := runtime.NewScheme()
	metav1.AddToGroupVersion(scheme, schema.GroupVersion{Version: "v1"})
	codecs := serializer.NewCodecFactory(scheme, serializer.WithSerializer(cborserializer.NewSerializerInfo))
	for _, mt := range []string{runtime.ContentTypeJSON, runtime.ContentTypeProtobuf, runtime.ContentTypeCBOR} {
		for _, status := range []*apierrors.StatusError{
			apierrors.NewConflict(schema.GroupResource{Resource: "configmaps"}, "cm", errors.New("the object has been modified")),
			apierrors.NewNotFound(schema.GroupResource{Resource: "configmaps"}, "cm"),
			apierrors.NewInvalid(schema.GroupKind{Kind: "ConfigMap"}, "cm", nil),
		} {
			t.Run(mt+"/"+string(status.ErrStatus.Reason), func(t *testing.T) {
				info, ok := runtime.SerializerInfoForMediaType(codecs.SupportedMediaTypes(), mt)
				require.True(t, ok, mt)
				var body bytes.Buffer
				s := status.ErrStatus
				s.APIVersion, s.Kind = "v1", "Status"
				require.NoError(t, info.Serializer.Encode(&s, &body))
				var copies atomic.Int32
				u, proxy := transporttest.BehindProxy(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					_, _ = io.Copy(io.Discard, r.Body)
					if r.Method == http.MethodPut && copies.Add(1) > 1 {
						w.Header().Set("Content-Type", mt)
						w.Header().Set("Content-Length", strconv.Itoa(body.Len()))
						w.WriteHeader(int(s.Code))
						_, _ = w.Write(body.Bytes())
						return
					}
					w.Header().Set("Content-Type", "application/json")
					_, _ = io.WriteString(w, `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"cm","resourceVersion":"6"}}`)
				}))
				base, err := transport.New()
				require.NoError(t, err)
				t.Cleanup(base.CloseIdleConnections)
				cfg := &rest.Config{Host: u, Transport: kubeadapter.Wrap()(base),
					ContentConfig: rest.ContentConfig{ContentType: mt, NegotiatedSerializer: codecs, GroupVersion: &schema.GroupVersion{Version: "v1"}},
					APIPath:       "/api"}
				client, err := rest.RESTClientFor(cfg)
				require.NoError(t, err)
				put := func() error {
					return client.Put().AbsPath("/api/v1/namespaces/ns/configmaps/cm").
						SetHeader("Content-Type", "application/json").
						Body([]byte(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"cm","resourceVersion":"5"}}`)).
						Do(t.Context()).Error()
				}
				require.NoError(t, client.Get().AbsPath("/api/v1/namespaces/ns/configmaps/cm").Do(t.Context()).Error())

				proxy.SetFaultExistingOnce(transporttest.ResetAfterResponse)
				err = put()
				require.Error(t, err)
				assert.Equal(t, int32(2), copies.Load(), "the guarded update was sent again")
				assert.Equal(t, s.Reason, apierrors.ReasonForError(err), "%v", err)
				assert.Equal(t, s.Code, apierrorsCode(err), "%v", err)
				assert.Contains(t, err.Error(), s.Message)
				assert.Contains(t, err.Error(), "the earlier copy may have been applied")
				assert.True(t, kubeadapter.IsMaybeApplied(err), "the Status carries the cause: %#v", err)
				assert.True(t, kubeadapter.IsMaybeApplied(fmt.Errorf("wrapped: %w", err)))

				err = put()
				require.Error(t, err, "a first copy refused")
				assert.Equal(t, s.Reason, apierrors.ReasonForError(err))
				assert.NotContains(t, err.Error(), "may have been applied")
				assert.False(t, kubeadapter.IsMaybeApplied(err))
			})
		}
	}
}

func apierrorsCode(err error) int32 {
	if s, ok := err.(apierrors.APIStatus); ok {
		return s.Status().Code
	}
	return 0
}

// TestMaybeAppliedOtherBodies: a refusal of a re-sent copy whose body is
// not a Status the stack can decode (here larger than a Status can be, or
// not JSON) reaches the caller byte for byte, with its Content-Length.
func TestMaybeAppliedOtherBodies(t *testing.T) {
	for _, tt := range []struct {
		name, contentType string
		size              int
	}{
		{"large", "application/json", 2 << 20},
		{"not a Status", "text/plain", 100},
	} {
		t.Run(tt.name, func(t *testing.T) {
			body := bytes.Repeat([]byte("x"), tt.size)
			var copies atomic.Int32
			u, proxy := transporttest.BehindProxy(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				_, _ = io.Copy(io.Discard, r.Body)
				if r.Method == http.MethodPut && copies.Add(1) > 1 {
					w.Header().Set("Content-Type", tt.contentType)
					w.Header().Set("Content-Length", strconv.Itoa(len(body)))
					w.WriteHeader(http.StatusConflict)
					_, _ = w.Write(body)
				}
			}))
			base, err := transport.New()
			require.NoError(t, err)
			t.Cleanup(base.CloseIdleConnections)
			rt := kubeadapter.Wrap()(base)
			warm, err := http.NewRequest(http.MethodGet, u+"/api/v1/namespaces/ns/configmaps/cm", nil)
			require.NoError(t, err)
			resp, err := rt.RoundTrip(warm)
			require.NoError(t, err)
			require.NoError(t, resp.Body.Close())

			proxy.SetFaultExistingOnce(transporttest.ResetAfterResponse)
			req, err := http.NewRequest(http.MethodPut, u+"/api/v1/namespaces/ns/configmaps/cm",
				strings.NewReader(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"cm","resourceVersion":"5"}}`))
			require.NoError(t, err)
			req.Header.Set("Content-Type", "application/json")
			resp, err = rt.RoundTrip(req)
			require.NoError(t, err)
			got, err := io.ReadAll(resp.Body)
			require.NoError(t, err)
			require.NoError(t, resp.Body.Close())
			assert.Equal(t, int32(2), copies.Load(), "sent again")
			assert.Equal(t, http.StatusConflict, resp.StatusCode)
			assert.Equal(t, body, got, "the body as the server sent it")
			assert.Equal(t, int64(len(body)), resp.ContentLength)
		})
	}
}

// TestIsMaybeApplied: only a Status with kubewire's cause counts; nil,
// other errors and other causes do not.
func TestIsMaybeApplied(t *testing.T) {
	conflict := apierrors.NewConflict(schema.GroupResource{Resource: "sandboxes"}, "sb", errors.New("the object has been modified"))
	assert.False(t, kubeadapter.IsMaybeApplied(nil))
	assert.False(t, kubeadapter.IsMaybeApplied(errors.New("409")))
	assert.False(t, kubeadapter.IsMaybeApplied(conflict))
	invalid := apierrors.NewInvalid(schema.GroupKind{Kind: "ConfigMap"}, "cm", nil)
	invalid.ErrStatus.Details.Causes = []metav1.StatusCause{{Type: metav1.CauseTypeFieldValueInvalid}}
	assert.False(t, kubeadapter.IsMaybeApplied(invalid))
	invalid.ErrStatus.Details.Causes = append(invalid.ErrStatus.Details.Causes, metav1.StatusCause{Type: kubeadapter.CauseTypeMaybeApplied})
	assert.True(t, kubeadapter.IsMaybeApplied(invalid))
	assert.False(t, kubeadapter.IsMaybeApplied(&apierrors.StatusError{}), "a Status without details")
}

// TestMaybeAppliedDeleteReadsBody: a DELETE guarded by a precondition in
// its body, whose answer is lost after the server deleted the object, is
// sent again and refused with 404. The API server ignores the query of a
// DELETE with a body, so dryRun=All there made no dry run: the refusal
// says the earlier copy may have been applied. Before the fix the query
// was read, and the 404 came with no note. A dry run asked in the body
// applies nothing, and its refusal gets no note.
func TestMaybeAppliedDeleteReadsBody(t *testing.T) {
	for _, tt := range []struct {
		name, dryRun, body string
		want               bool
	}{
		{"dryRun in the query", "All", `{"preconditions":{"uid":"u1"}}`, true},
		{"dryRun in the body", "", `{"dryRun":["All"],"preconditions":{"uid":"u1"}}`, false},
		{"dryRun in both", "All", `{"dryRun":["All"],"preconditions":{"uid":"u1"}}`, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var copies atomic.Int32
			u, proxy := transporttest.BehindProxy(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				_, _ = io.Copy(io.Discard, r.Body)
				w.Header().Set("Content-Type", "application/json")
				if r.Method == http.MethodDelete {
					assert.Equal(t, tt.dryRun, r.URL.Query().Get("dryRun"))
				}
				if r.Method == http.MethodDelete && copies.Add(1) > 1 {
					w.WriteHeader(http.StatusNotFound)
					_, _ = io.WriteString(w, `{"apiVersion":"v1","kind":"Status","status":"Failure","message":"configmaps \"cm\" not found","reason":"NotFound","details":{"name":"cm","kind":"configmaps"},"code":404}`)
					return
				}
				_, _ = io.WriteString(w, `{"apiVersion":"v1","kind":"Status","status":"Success"}`)
			}))
			base, err := transport.New()
			require.NoError(t, err)
			t.Cleanup(base.CloseIdleConnections)
			cfg := &rest.Config{Host: u, Transport: kubeadapter.Wrap()(base),
				ContentConfig: rest.ContentConfig{NegotiatedSerializer: scheme.Codecs.WithoutConversion(), GroupVersion: &schema.GroupVersion{Version: "v1"}},
				APIPath:       "/api"}
			client, err := rest.RESTClientFor(cfg)
			require.NoError(t, err)
			require.NoError(t, client.Get().AbsPath("/api/v1/namespaces/ns/configmaps/cm").Do(t.Context()).Error())

			proxy.SetFaultExistingOnce(transporttest.ResetAfterResponse)
			del := client.Delete().AbsPath("/api/v1/namespaces/ns/configmaps/cm")
			if tt.dryRun != "" {
				del.Param("dryRun", tt.dryRun)
			}
			err = del.SetHeader("Content-Type", "application/json").Body([]byte(tt.body)).Do(t.Context()).Error()
			require.Error(t, err)
			assert.Equal(t, int32(2), copies.Load(), "the guarded delete was sent again")
			assert.True(t, apierrors.IsNotFound(err), "%v", err)
			assert.Equal(t, tt.want, kubeadapter.IsMaybeApplied(err), "%v", err)
			assert.Equal(t, tt.want, strings.Contains(err.Error(), "the earlier copy may have been applied"), "%v", err)
		})
	}
}
