# cove's warm Python interpreter. cove-agent starts it with this script as
# `python3 -c` and talks to it in JSON lines: requests on fd 3, answers on
# fd 4. Fds 0-2 are left to user code, so nothing it prints can corrupt the
# protocol. Globals live in a fresh __main__ module that persists between
# calls.
import ast
import builtins
import io
import json
import linecache
import os
import random
import sys
import traceback
import types

REQ_FD, RESP_FD = 3, 4


class _Sink(io.BytesIO):
    """Keeps the first `limit` bytes written and counts the rest away."""

    def __init__(self, limit):
        super().__init__()
        self.limit = limit
        self.truncated = False

    def write(self, b):
        b = memoryview(b).cast("B")
        n = b.nbytes
        room = self.limit - self.tell()
        if n > room:
            self.truncated = True
            b = b[: max(room, 0)]
        if b.nbytes:
            super().write(b)
        return n


class _Capture:
    """A text stream standing in for sys.stdout or sys.stderr in one call."""

    def __init__(self, limit):
        self.sink = _Sink(limit)
        self.text = io.TextIOWrapper(
            self.sink, encoding="utf-8", errors="backslashreplace", write_through=True
        )

    def value(self):
        try:
            self.text.flush()
        except ValueError:  # user code closed it
            pass
        return self.sink.getvalue().decode("utf-8", "replace"), self.sink.truncated


def _format_exception(e):
    # Drop the frames of this driver (and of ast/compile) above the cell.
    tb = e.__traceback__
    while tb is not None and not tb.tb_frame.f_code.co_filename.startswith("<cell-"):
        tb = tb.tb_next
    return "".join(traceback.format_exception(type(e), e, tb))


def run_cell(ns, code, name, limit):
    # Registering the source lets tracebacks show the failing lines, also
    # for functions defined in earlier cells.
    linecache.cache[name] = (len(code), None, code.splitlines(True), name)
    out, err = _Capture(limit), _Capture(limit)
    result = error = ""
    saved = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = out.text, err.text
    try:
        tree = ast.parse(code, name, "exec")
        last = None
        if tree.body and isinstance(tree.body[-1], ast.Expr):
            # Like a notebook cell: a trailing expression is the result.
            last = ast.Expression(tree.body.pop().value)
        exec(compile(tree, name, "exec"), ns)
        if last is not None:
            value = eval(compile(last, name, "eval"), ns)
            if value is not None:
                result = repr(value)
    except BaseException as e:  # SystemExit and KeyboardInterrupt included
        error = _format_exception(e)
    finally:
        sys.stdout, sys.stderr = saved
    stdout, stdout_cut = out.value()
    stderr, stderr_cut = err.value()
    if len(result) > limit:
        result = result[:limit] + "..."
    return {
        "result": result,
        "error": error,
        "stdout": stdout,
        "stderr": stderr,
        "truncated": stdout_cut or stderr_cut,
    }


def reseed():
    # After a snapshot is restored, every clone would otherwise draw the
    # same "random" numbers.
    random.seed()
    np = sys.modules.get("numpy")
    if np is not None:
        try:
            np.random.seed()
        except Exception:
            pass


def main():
    # Commands that user code starts must not hold the protocol pipes.
    os.set_inheritable(REQ_FD, False)
    os.set_inheritable(RESP_FD, False)
    reqs = os.fdopen(REQ_FD, "r", encoding="utf-8")
    # Answers carry text as UTF-8 rather than \u escapes, which can take
    # six bytes a character; a lone surrogate, which UTF-8 cannot carry,
    # becomes its JSON escape.
    resps = os.fdopen(RESP_FD, "w", encoding="utf-8", errors="backslashreplace")

    main_mod = types.ModuleType("__main__")
    main_mod.__builtins__ = builtins
    sys.modules["__main__"] = main_mod  # so pickle finds cell definitions
    sys.argv = [""]
    if "" not in sys.path:
        sys.path.insert(0, "")

    n = 0
    for line in reqs:
        req = json.loads(line)
        op = req.get("op")
        if op == "eval":
            n += 1
            resp = run_cell(main_mod.__dict__, req["code"], "<cell-%d>" % n, req["limit"])
        elif op == "reseed":
            reseed()
            resp = {}
        elif op == "ping":
            resp = {}
        else:
            resp = {"error": "unknown op %r" % op}
        resps.write(json.dumps(resp, ensure_ascii=False) + "\n")
        resps.flush()


main()
