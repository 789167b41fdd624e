"""Imported once by the campaigns' fork server, so every forked worker starts warm: the
library and its drivers imported, botocore's S3 model loaded (a client then costs ~5 ms)."""

from __future__ import annotations

import contextlib
import warnings

# A worker re-imports the main module (``python -m stress.<name>``) under another name.
warnings.filterwarnings("ignore", category=RuntimeWarning, message=".*found in sys.modules")

import agent_checkpoint.backends._disk  # noqa: E402, F401

for _name in ("redis", "postgres", "s3"):
    with contextlib.suppress(ImportError):
        __import__(f"agent_checkpoint.backends._{_name}")

with contextlib.suppress(Exception):
    from .common import _botocore_session

    _botocore_session().get_service_model("s3")
