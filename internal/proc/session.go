package proc

import (
	"os"
	"strconv"
	"strings"
	"syscall"
)

// Session returns the session id of pid, from /proc/PID/stat.
func Session(pid int) (int, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, err
	}
	return parseSession(string(b))
}

// parseSession reads the session id from a /proc/PID/stat line: the
// fourth field after the command name, which may itself hold ')'.
func parseSession(stat string) (int, error) {
	i := strings.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, syscall.EINVAL
	}
	// state ppid pgrp session ...
	f := strings.Fields(stat[i+1:])
	if len(f) < 4 {
		return 0, syscall.EINVAL
	}
	return strconv.Atoi(f[3])
}

// InSession returns the live processes of session sid, other than this
// one: what a terminal's session leader left running.
func InSession(sid int) []int {
	return others(func(pid int) bool {
		s, err := Session(pid)
		return err == nil && s == sid
	})
}

// SignalSession sends sig to every live process of session sid and says
// how many it signalled.
func SignalSession(sid int, sig syscall.Signal) int {
	n := 0
	for _, pid := range InSession(sid) {
		if syscall.Kill(pid, sig) == nil {
			n++
		}
	}
	return n
}
