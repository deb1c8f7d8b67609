# The launcher of dllm eval's code sandbox (eval/sandbox.go), run as
# `python3 -c THIS WORKDIR ISOLATE TIMEOUT MEMORY`. WORKDIR holds prog.py
# (the model's program) and tests.json ({"func_name": NAME or "", "cases":
# [{"input": ..., "output": ...}]}); the launcher prints one JSON line, the
# verdict: {"status": "pass"|"wrong"|"timeout"|"error"|"sandbox", "passed":
# N, "total": N, "test": I, "detail": TEXT}.
#
# The tests run and are compared as LiveCodeBench's lcb_runner does
# (testing_util.py): its import header before the program, its
# reliability guard, a stop at the first failing test; a stdin program's
# output compared line by line after stripping, a line that differs
# passing only if its whitespace-separated tokens are all equal as
# Decimals; a call's result (a top-level tuple made a list) compared with
# ==. Unlike lcb_runner, a stdin program runs as a program, in a process
# of its own per test with the input on its real standard input, rather
# than as a function with a mocked sys.stdin.
#
# With ISOLATE=1 the launcher was started in new user, mount, network and
# PID namespaces (sandbox_linux.go) and first makes every mount read-only
# but WORKDIR, then enters one more user namespace, which leaves it no
# capability over those mounts: the program cannot write outside WORKDIR,
# reach any network, or outlive the launcher.
import ctypes
import json
import os
import signal
import sys
import time
from decimal import Decimal, InvalidOperation

WORKDIR, ISOLATE, TIMEOUT, MEMORY = sys.argv[1], sys.argv[2] == "1", float(sys.argv[3]), int(sys.argv[4])

HEADER = """from string import *
from re import *
from datetime import *
from collections import *
from heapq import *
from bisect import *
from copy import *
from math import *
from random import *
from statistics import *
from itertools import *
from functools import *
from operator import *
from io import *
from sys import *
from json import *
from builtins import *
from typing import *
import string
import re
import datetime
import collections
import heapq
import bisect
import copy
import math
import random
import statistics
import itertools
import functools
import operator
import io
import sys
import json
sys.setrecursionlimit(50000)
"""


def verdict(status, passed=0, total=0, test=-1, detail=""):
    sys.__stdout__.write(json.dumps({"status": status, "passed": passed, "total": total, "test": test, "detail": detail[:2000]}) + "\n")
    sys.__stdout__.flush()
    os._exit(0)


def isolate():
    libc = ctypes.CDLL(None, use_errno=True)
    MS_BIND, MS_REC, AT_FDCWD, AT_RECURSIVE, MOUNT_ATTR_RDONLY, SYS_MOUNT_SETATTR = 4096, 16384, -100, 0x8000, 1, 442
    CLONE_NEWUSER = 0x10000000

    class MountAttr(ctypes.Structure):
        _fields_ = [("attr_set", ctypes.c_uint64), ("attr_clr", ctypes.c_uint64), ("propagation", ctypes.c_uint64), ("userns_fd", ctypes.c_uint64)]

    def check(rc, what):
        if rc != 0:
            e = ctypes.get_errno()
            verdict("sandbox", detail="%s: %s" % (what, os.strerror(e)))

    wd = WORKDIR.encode()
    check(libc.mount(wd, wd, None, MS_BIND | MS_REC, None), "bind-mounting the work directory")
    ro = MountAttr(MOUNT_ATTR_RDONLY, 0, 0, 0)
    libc.syscall.argtypes = [ctypes.c_long, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint, ctypes.c_void_p, ctypes.c_size_t]
    check(libc.syscall(SYS_MOUNT_SETATTR, AT_FDCWD, b"/", AT_RECURSIVE, ctypes.byref(ro), ctypes.sizeof(ro)), "making the file systems read-only (mount_setattr, Linux 5.12+)")
    rw = MountAttr(0, MOUNT_ATTR_RDONLY, 0, 0)
    check(libc.syscall(SYS_MOUNT_SETATTR, AT_FDCWD, wd, 0, ctypes.byref(rw), ctypes.sizeof(rw)), "making the work directory writable")
    check(libc.unshare(CLONE_NEWUSER), "dropping the capabilities (a user namespace)")


def limit():
    """Limits of a test's process: its memory (address space), CPU time
    (a backstop behind the wall-clock timeout) and file sizes."""
    import resource

    if MEMORY > 0:
        for r in (resource.RLIMIT_AS, resource.RLIMIT_DATA):
            resource.setrlimit(r, (MEMORY, MEMORY))
    cpu = int(TIMEOUT) + 2
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu))
    resource.setrlimit(resource.RLIMIT_FSIZE, (256 << 20, 256 << 20))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def guard():
    """lcb_runner's reliability_guard: what a program must not do to the
    machine, disabled (plus setsid and setpgid, which would let a process
    leave the launcher's process group)."""
    import builtins
    import faulthandler
    import shutil
    import subprocess

    faulthandler.disable()
    os.environ["OMP_NUM_THREADS"] = "1"
    builtins.quit = None
    for name in ("kill", "system", "putenv", "remove", "removedirs", "rmdir", "fchdir", "setuid", "fork", "forkpty", "killpg",
                 "rename", "renames", "truncate", "replace", "unlink", "fchmod", "fchown", "chmod", "chown", "chroot", "lchflags",
                 "lchmod", "lchown", "getcwd", "chdir", "setsid", "setpgid", "execv", "execve", "posix_spawn", "posix_spawnp"):
        setattr(os, name, None)
    shutil.rmtree = shutil.move = shutil.chown = None
    subprocess.Popen = None
    builtins.help = None
    for m in ("ipdb", "joblib", "resource", "psutil", "tkinter"):
        sys.modules[m] = None


def compile_program(src):
    return compile(HEADER + "\n\n" + src, "prog.py", "exec")


def stripped_lines(s):
    return [line.strip() for line in s.strip().split("\n")]


def same_output(got, want):
    g, w = stripped_lines(got), stripped_lines(want)
    if len(g) != len(w):
        return False
    for a, b in zip(g, w):
        if a == b:
            continue
        try:
            if [Decimal(x) for x in a.split()] != [Decimal(x) for x in b.split()]:
                return False
        except (InvalidOperation, ValueError):
            return False
    return True


def wait(pid, limit):
    """Waits for pid at most limit seconds (then kills it): its status,
    or None on a timeout."""
    deadline = time.monotonic() + limit
    delay = 0.0005
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return status
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            return None
        time.sleep(delay)
        delay = min(delay * 2, 0.01)


def describe(status, errfile):
    detail = ""
    try:
        with open(errfile, encoding="utf-8", errors="replace") as f:
            lines = [l for l in f.read().strip().split("\n") if l.strip()]
            detail = lines[-1] if lines else ""
    except OSError:
        pass
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        what = {signal.SIGKILL: "killed (memory or CPU limit)", signal.SIGXCPU: "CPU time limit", signal.SIGSEGV: "segmentation fault"}.get(sig, "signal %d" % sig)
        return (what + ": " + detail) if detail else what
    return detail or "exit status %d" % os.WEXITSTATUS(status)


def redirect():
    """Points a test process's stdout and stderr at out.txt and err.txt."""
    for fd, name in ((1, "out.txt"), (2, "err.txt")):
        os.dup2(os.open(name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), fd)
    sys.stdout = open(1, "w", encoding="utf-8", closefd=False)
    sys.stderr = open(2, "w", encoding="utf-8", closefd=False)


def child(run):
    """In a forked test process: limits, the guard, then run(); exit 0 when
    it returns (or exits), 1 with the error on stderr when it raises."""
    try:
        limit()
        guard()
        run()
    except SystemExit:
        pass
    except BaseException as e:
        try:
            sys.stdout.flush()
        except BaseException:
            pass
        sys.stderr.write("%s: %s\n" % (type(e).__name__, str(e)[:500]))
        sys.stderr.flush()
        os._exit(1)
    try:
        sys.stdout.flush()
    except BaseException:
        pass
    os._exit(0)


def run_stdin(code, cases):
    """A process per test: the program with the input on its standard
    input, its output compared."""
    for i, case in enumerate(cases):
        with open("in.txt", "w", encoding="utf-8") as f:
            f.write(case["input"])
        pid = os.fork()
        if pid == 0:
            def run():
                exec(code, {"__name__": "__main__", "__builtins__": __builtins__})
            os.dup2(os.open("in.txt", os.O_RDONLY), 0)
            sys.stdin = open(0, encoding="utf-8", errors="replace", closefd=False)
            redirect()
            child(run)
        status = wait(pid, TIMEOUT)
        if status is None:
            verdict("timeout", i, len(cases), i, "over %gs" % TIMEOUT)
        if status != 0:
            verdict("error", i, len(cases), i, describe(status, "err.txt"))
        with open("out.txt", encoding="utf-8", errors="replace") as f:
            got = f.read()
        if not same_output(got, case["output"]):
            verdict("wrong", i, len(cases), i, "got %r, want %r" % (got[:300], case["output"][:300]))
    verdict("pass", len(cases), len(cases))


def run_call(code, has_class, func, cases):
    """One process for all tests, as lcb_runner: the program loaded once,
    each test a call of Solution().func (or the module's func), with an
    alarm per test; results come back through a pipe, a line per test."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        out = os.fdopen(w, "w")

        def report(status, detail=""):
            out.write(json.dumps({"status": status, "detail": detail}) + "\n")
            out.flush()

        def on_alarm(signum, frame):
            raise TimeoutError("over %gs" % TIMEOUT)

        def timed(f):
            signal.setitimer(signal.ITIMER_REAL, TIMEOUT)
            try:
                return f()
            finally:
                signal.setitimer(signal.ITIMER_REAL, 0)

        def run():
            signal.signal(signal.SIGALRM, on_alarm)
            env = {"__name__": "__main__", "__builtins__": __builtins__}
            try:
                timed(lambda: exec(code, env))
                method = getattr(env["Solution"](), func) if has_class else env[func]
                for case in cases:
                    args = [json.loads(line) for line in case["input"].split("\n")]
                    want = json.loads(case["output"])
                    got = timed(lambda: method(*args))
                    if isinstance(got, tuple):
                        got = list(got)
                    if got != want:
                        return report("wrong", "got %s, want %s" % (repr(got)[:300], repr(want)[:300]))
                    report("pass")
            except TimeoutError as e:
                report("timeout", str(e))

        redirect()
        child(run)
    os.close(w)
    results = []
    import threading

    def read():
        with os.fdopen(r) as f:
            for line in f:
                results.append(json.loads(line))

    t = threading.Thread(target=read, daemon=True)
    t.start()
    status = wait(pid, (TIMEOUT + 1) * len(cases) + 5)
    t.join(1)
    passed = sum(1 for x in results if x["status"] == "pass")
    if passed == len(cases):
        verdict("pass", passed, len(cases))
    if results and results[-1]["status"] != "pass":
        verdict(results[-1]["status"], passed, len(cases), passed, results[-1]["detail"])
    if status is None:
        verdict("timeout", passed, len(cases), passed, "over %gs" % ((TIMEOUT + 1) * len(cases) + 5))
    if status == 0:
        verdict("error", passed, len(cases), passed, "the program exited during the test")
    verdict("error", passed, len(cases), passed, describe(status, "err.txt"))


def main():
    if ISOLATE:
        isolate()
    os.chdir(WORKDIR)  # after isolate(): the writable mount is the one bound over it
    with open("tests.json", encoding="utf-8") as f:
        tests = json.load(f)
    os.unlink("tests.json")  # the program must not read the expected outputs
    if hasattr(sys, "set_int_max_str_digits"):
        sys.set_int_max_str_digits(50000)
    with open("prog.py", encoding="utf-8", errors="replace") as f:
        src = f.read()
    try:
        code = compile_program(src)
    except SyntaxError as e:
        verdict("error", 0, len(tests["cases"]), 0, "SyntaxError: %s (line %s of the program)" % (e.msg, (e.lineno or 0) - HEADER.count("\n") - 2))
    except ValueError as e:
        verdict("error", 0, len(tests["cases"]), 0, "ValueError: %s" % e)
    for m in ("string", "re", "datetime", "collections", "heapq", "bisect", "copy", "math", "random", "statistics", "itertools", "functools", "operator", "io", "json", "typing"):
        __import__(m)  # once here, so that each test's process starts with them loaded
    if tests.get("func_name"):
        run_call(code, "class Solution" in src, tests["func_name"], tests["cases"])
    else:
        run_stdin(code, tests["cases"])


main()
