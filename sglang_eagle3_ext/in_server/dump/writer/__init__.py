"""The dump writer: on io threads in this process (thread.py) or in a child process of its own (process.py, child.py)."""
