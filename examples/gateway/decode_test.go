package main

import (
	"bytes"
	"encoding"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kubewire/kubewire/driver"
)

// FuzzDecodeCreate checks decodeCreate against an oracle written without
// it: a body is accepted exactly when it is one JSON object, all of whose
// keys, at every depth, are fields of the type they decode into (spelled
// as the tag, each once), with nothing after it, and its values decode;
// the request is then what encoding/json makes of it. Anything else is
// refused with kind invalid argument, 413 if the body is over the limit
// and 400 otherwise, and an error naming the problem.
func FuzzDecodeCreate(f *testing.F) {
	for _, s := range []string{
		`{"name":"alpha","podTemplate":` + template + `}`,
		`{"name":"alpha","podTemplate":{"metadata":{"labels":{"a":"b"},"annotations":{"c":"d"}},"spec":{"containers":[{"name":"agent","image":"busybox","resources":{"limits":{"cpu":"500m"}},"ports":[{"containerPort":8080}]}],"nodeSelector":{"k":"v"}}}}` + "\n",
		` {"name":"a"} `,
		`{}`,
		`{"name":"alpha","podTemplat":{}}`,
		`{"Name":"alpha"}`,
		`{"name":"alpha","name":"beta"}`,
		`{"podTemplate":{"metadata":{"labels":{"a":"b","a":"c"}}}}`,
		`{"podTemplate":{"spec":{"containers":[{"imagePullPolicyy":"Always"}]}}}`,
		`{"name":"alpha"}garbage`,
		`{"name":"alpha"}{"name":"beta"}`,
		`{"name":7}`,
		`{"podTemplate":{"spec":{"containers":[{"resources":{"limits":{"cpu":"abc"}}}]}}}`,
		`{"name":`,
		`null`,
		`[]`,
		`"alpha"`,
		``,
		"\ufeff{}",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		req, err := decodeCreate("team-a", http.MaxBytesReader(httptest.NewRecorder(), io.NopCloser(bytes.NewReader(b)), maxBody))
		problem := judge(b)
		var std createRequest
		stdErr := json.Unmarshal(b, &std)
		if err == nil {
			require.Empty(t, problem, "accepted %q", b)
			require.NoError(t, stdErr, "accepted, but encoding/json refuses it")
			require.Equal(t, std, req)
			return
		}
		require.Zero(t, req)
		var de *driver.Error
		require.ErrorAs(t, err, &de)
		require.Equal(t, driver.KindInvalidArgument, de.Kind)
		msg := err.Error()
		require.Contains(t, msg, "request body")
		if problem == tooLarge {
			require.Equal(t, http.StatusRequestEntityTooLarge, statusOf(err))
			require.Contains(t, msg, "is larger than 1048576 bytes")
			return
		}
		require.Equal(t, http.StatusBadRequest, statusOf(err))
		switch problem {
		case "":
			// Keys and shape are right: only a value can be wrong, and
			// encoding/json must find it wrong too.
			require.Error(t, stdErr, "refused a body with only known fields: %v", err)
			for _, wrong := range []string{"unknown field", "duplicate field", "after the JSON object", "not a JSON object", "is empty"} {
				require.NotContains(t, msg, wrong)
			}
		case badFields:
			// A value's error may come first; without one, the field.
			if stdErr == nil {
				require.Regexp(t, `(unknown|duplicate) field "`, msg)
			}
		default:
			require.Contains(t, msg, string(problem))
		}
	})
}

// problem is what judge finds wrong with a body, as the words decodeCreate's
// error must contain.
type problem string

const (
	tooLarge  problem = "larger"
	empty     problem = "request body is empty"
	notObject problem = "request body is not a JSON object"
	syntax    problem = "request body" // a syntax error or data after the object
	badFields problem = "field"
)

// judge says what is wrong with body, without decodeCreate's code: ""
// when it is one JSON object whose keys are all known and given once.
func judge(body []byte) problem {
	v := bytes.TrimLeft(body, " \t\r\n")
	switch {
	case len(body) > maxBody:
		return tooLarge
	case len(v) == 0:
		return empty
	case v[0] != '{':
		return notObject
	case !json.Valid(body):
		return syntax
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	if !knownKeys(dec, reflect.TypeFor[createRequest]()) {
		return badFields
	}
	return ""
}

var (
	jsonUnmarshaler = reflect.TypeFor[json.Unmarshaler]()
	textUnmarshaler = reflect.TypeFor[encoding.TextUnmarshaler]()
)

// knownKeys reads one value from dec, valid JSON, and reports whether
// every object key in it names a field of the type it decodes into, once.
// t is nil where nothing is checked: inside a value a type decodes itself,
// or one that does not fit its type (a type error, not a field error).
func knownKeys(dec *json.Decoder, t reflect.Type) bool {
	tok, err := dec.Token()
	if err != nil {
		panic(err) // the body is valid JSON
	}
	delim, ok := tok.(json.Delim)
	if !ok {
		return true
	}
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t != nil && (reflect.PointerTo(t).Implements(jsonUnmarshaler) || reflect.PointerTo(t).Implements(textUnmarshaler)) {
		t = nil
	}
	good := true
	switch delim {
	case '[':
		var elem reflect.Type
		if t != nil && (t.Kind() == reflect.Slice || t.Kind() == reflect.Array) {
			elem = t.Elem()
		}
		for dec.More() {
			good = knownKeys(dec, elem) && good
		}
	case '{':
		var fields map[string]reflect.Type
		if t != nil && t.Kind() == reflect.Struct {
			fields = jsonFields(t)
		}
		seen := map[string]bool{}
		for dec.More() {
			tok, err := dec.Token()
			if err != nil {
				panic(err)
			}
			key := tok.(string)
			var vt reflect.Type
			switch {
			case t == nil:
			case t.Kind() == reflect.Struct:
				ft, known := fields[key]
				good = good && known && !seen[key]
				vt = ft
			case t.Kind() == reflect.Map:
				good = good && !seen[key]
				vt = t.Elem()
			case t.Kind() == reflect.Interface:
				good = good && !seen[key]
				vt = t
			}
			seen[key] = true
			good = knownKeys(dec, vt) && good
		}
	}
	if _, err := dec.Token(); err != nil {
		panic(err)
	}
	return good
}

// jsonFields returns the JSON names of struct t's fields and their types,
// with embedded structs' fields inlined, as encoding/json names them.
func jsonFields(t reflect.Type) map[string]reflect.Type {
	out := map[string]reflect.Type{}
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" && f.Tag.Get("json") == "-" {
			continue
		}
		if f.Anonymous && name == "" {
			et := f.Type
			if et.Kind() == reflect.Pointer {
				et = et.Elem()
			}
			if et.Kind() == reflect.Struct {
				for k, v := range jsonFields(et) {
					if _, ok := out[k]; !ok {
						out[k] = v
					}
				}
				continue
			}
		}
		if !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		out[name] = f.Type
	}
	return out
}

// manyFields is a create body with n unknown fields, f0 to f(n-1).
func manyFields(n int) string {
	var b strings.Builder
	b.WriteString(`{"name":"alpha"`)
	for i := range n {
		fmt.Fprintf(&b, `,"f%d":%d`, i, i)
	}
	return b.String() + "}"
}

// TestDecodeCreate: what decodeCreate accepts, and the words it refuses
// the rest with.
func TestDecodeCreate(t *testing.T) {
	req, err := decodeCreate("team-a", strings.NewReader(` {"name":"alpha","podTemplate":`+template+"}\r\n\t "))
	require.NoError(t, err)
	assert.Equal(t, "alpha", req.Name)
	require.Len(t, req.PodTemplate.Spec.Containers, 1)
	assert.Equal(t, "busybox", req.PodTemplate.Spec.Containers[0].Image)

	tests := []struct {
		give string
		want string
	}{
		{`{"name":"alpha","podTemplate":{"spec":{"containers":[{"name":"agent","imagePullPolicyy":"Always"}]}},"x":1}`,
			`request body: unknown field "podTemplate.spec.containers[0].imagePullPolicyy"; unknown field "x"`},
		{`{"name":"alpha"} x`, "request body has data after the JSON object, from byte 16"},
		{`{"podTemplate":{"metadata":{"labels":{"a":"b","a":"c"}}}}`, `request body: duplicate field "podTemplate.metadata.labels.a"`},
		{`{"name" 5}`, "request body: invalid character '5' after object key"},
		{" \n", "request body is empty: want a JSON object"},
		{`"alpha"`, "request body is not a JSON object"},
		{manyFields(7), `request body: unknown field "f0"; unknown field "f1"; unknown field "f2"; unknown field "f3"; unknown field "f4"; and 2 more`},
		{`{"` + strings.Repeat("k", 1000) + `":1}`, `request body: unknown field "` + strings.Repeat("k", 2*maxQuoted-15) + `... (1016 bytes)`},
	}
	for _, tt := range tests {
		_, err := decodeCreate("team-a", strings.NewReader(tt.give))
		assert.EqualError(t, err, "driver: create sandbox team-a/: invalid argument: "+tt.want, tt.give)
	}

	_, err = decodeCreate("team-a", http.MaxBytesReader(httptest.NewRecorder(), io.NopCloser(strings.NewReader(strings.Repeat(" ", maxBody)+"{}")), maxBody))
	var tooLarge *http.MaxBytesError
	require.ErrorAs(t, err, &tooLarge)
	assert.Equal(t, http.StatusRequestEntityTooLarge, statusOf(err))
	assert.EqualError(t, err, "driver: create sandbox team-a/: invalid argument: request body is larger than 1048576 bytes (1 MiB): http: request body too large")
	_, err = decodeCreate("team-a", http.MaxBytesReader(httptest.NewRecorder(), io.NopCloser(strings.NewReader(strings.Repeat(" ", maxBody-2)+"{}")), maxBody))
	assert.NoError(t, err, "a body of exactly the limit")

	// Unknown fields by the thousand: a short answer, and every field
	// error the decoder kept (it keeps the first 100) found by errors.As.
	_, err = decodeCreate("team-a", strings.NewReader(manyFields(50000)))
	assert.Less(t, len(err.Error()), 512)
	assert.Contains(t, err.Error(), "; and 95 more")
	var fieldErrs interface{ Unwrap() []error }
	require.ErrorAs(t, err, &fieldErrs)
	assert.Len(t, fieldErrs.Unwrap(), 100)

	broken := errors.New("connection broke")
	_, err = decodeCreate("team-a", iotest.ErrReader(broken))
	assert.ErrorIs(t, err, broken)
	assert.Equal(t, http.StatusBadRequest, statusOf(err))
}
