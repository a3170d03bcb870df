"""Verifiable reward functions: pure Python over strings and ground truth, no model, no engine.

Model outputs are untrusted text. Every function here returns a number for any input:
no eval, regexes run under a time limit, numbers are parsed with size limits.
"""
