"""airlock's Python client: lease secret-free sandboxes and run, build and install in them.

    from airlock import Client
    with Client().sandbox(allow=["api.example.test"], profiles=["pypi"]) as sb:
        sb.files.write("app.py", "print('hi')")
        print(sb.run("python3 app.py").stdout)
"""

from .client import (
    AirlockError,
    Client,
    Entry,
    Explanation,
    Files,
    NotFound,
    Paused,
    Process,
    Processes,
    Refused,
    Restored,
    RunResult,
    Sandbox,
    Snapshot,
    TimedOut,
)

__all__ = [
    "AirlockError",
    "Client",
    "Entry",
    "Explanation",
    "Files",
    "NotFound",
    "Paused",
    "Process",
    "Processes",
    "Refused",
    "Restored",
    "RunResult",
    "Sandbox",
    "Snapshot",
    "TimedOut",
]
__version__ = "0.1.0"
