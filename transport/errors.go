package transport

// ConfigError is the error every request fails with when it passes through
// a middleware built with invalid options: the request is not sent. Its
// message names the option and the value. Middleware above passes it on
// unchanged, since no attempt was made: retry does not count or retry it,
// pooltrace does not wrap it.
type ConfigError struct {
	Err error
}

func (e *ConfigError) Error() string { return e.Err.Error() }

func (e *ConfigError) Unwrap() error { return e.Err }
