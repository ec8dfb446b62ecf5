package bundle

// ReadPayloadFiles makes Write read payload files instead of mapping them,
// as where mapping is not possible, until restore is called. Not for
// parallel tests.
func ReadPayloadFiles() (restore func()) {
	mapFiles = false
	return func() { mapFiles = true }
}
