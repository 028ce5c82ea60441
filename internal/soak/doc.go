// Package soak judges a gateway run for minutes under mixed connection
// faults the way Jepsen does: a history of client operations, each with
// its answer, checked against an independent record, here the API
// server's own audit log.
package soak
