//go:build !unix

package serve

// raiseOpenFileLimit is unknown off Unix: the connection limit stands as
// configured.
func raiseOpenFileLimit() uint64 { return 0 }
