// Package naive is the common Go way of giving a client a read timeout, a
// read deadline set on the connection at each Read, which the integration
// tests reproduce the field report's failure with. examples/repro keeps
// the same code, both generated from hack/shared/naive.go.tmpl.
package naive
