package agent

import (
	"errors"
	"io/fs"
	"syscall"

	"github.com/cove-sandbox/cove/internal/agentproto"
)

// fsError maps a file system error onto an agentproto error code, keeping
// the message, which names the path.
func fsError(err error) error {
	if err == nil {
		return nil
	}
	var e *agentproto.Error
	if errors.As(err, &e) {
		return err
	}
	code := agentproto.CodeInternal
	switch {
	case errors.Is(err, fs.ErrNotExist):
		code = agentproto.CodeNotFound
	case errors.Is(err, syscall.EISDIR):
		code = agentproto.CodeIsDir
	case errors.Is(err, fs.ErrPermission),
		errors.Is(err, syscall.ENOTDIR),
		errors.Is(err, syscall.EROFS),
		errors.Is(err, syscall.ENAMETOOLONG),
		errors.Is(err, syscall.ELOOP),
		errors.Is(err, fs.ErrExist),
		errors.Is(err, fs.ErrInvalid):
		// The caller asked for something this file system cannot do.
		code = agentproto.CodeInvalid
	}
	return &agentproto.Error{Code: code, Message: err.Error()}
}
