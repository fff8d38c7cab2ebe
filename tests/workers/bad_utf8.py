"""Writes invalid UTF-8 bytes, then a valid line."""

import os

os.write(1, b"bad \xff\xfe bytes\n")
os.write(1, "ok \u00e9\n".encode())
