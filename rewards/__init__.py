"""Verifiable reward functions: pure Python over strings and ground truth, no model, no engine.

Model outputs are untrusted text. Every function here returns a number for any input:
no eval, regexes run under a time limit, numbers are parsed with size limits. The one
exception is time: math-verify's calls run in a child process (rewards/worker.py), and one
that gives no verdict within its limit raises TimeoutError, which the scorer counts.
"""
