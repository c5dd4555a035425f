package pgstore

import (
	"context"
	"errors"
	"io"
	"net"

	"github.com/jackc/pgx/v5/pgconn"
)

// transientCodes are the SQLSTATEs of a server going away or coming back,
// and of a broken connection.
var transientCodes = map[string]bool{
	"57P01": true, // admin_shutdown: a fast or smart shutdown ended the session
	"57P02": true, // crash_shutdown: another server process crashed
	"57P03": true, // cannot_connect_now: the server is starting up or shutting down
	"08000": true, // connection_exception
	"08003": true, // connection_does_not_exist
	"08006": true, // connection_failure
}

// Transient reports whether err is a database failure that a later
// attempt may get past: the server shutting down, crashed or starting up
// (SQLSTATE 57P01, 57P02, 57P03), a connection exception (08000, 08003,
// 08006), a connection refused, reset or closed under the request (a
// net.Error, io.EOF, io.ErrUnexpectedEOF, pgconn.ErrConnClosed), a new
// connection the server did not answer within its connect timeout, or a
// request pgx never sent (pgconn.SafeToRetry). A fenced write (ErrFenced),
// any other error of the server's (a violated constraint, a failed
// authentication) and a context's end are not.
func Transient(err error) bool {
	if err == nil || errors.Is(err, ErrFenced) {
		return false
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return transientCodes[pe.Code]
	}
	var ce *pgconn.ConnectError
	if errors.As(err, &ce) && pgconn.Timeout(err) {
		return true // the connect timeout, not the caller's context
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	var ne net.Error
	return pgconn.SafeToRetry(err) || errors.Is(err, pgconn.ErrConnClosed) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.As(err, &ne)
}
