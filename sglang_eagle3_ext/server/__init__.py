"""The SGLang server as this package sees it: in-process (`runtime`: its arguments and model configs) and over
HTTP (`http_client`: whole-request deadlines; `replies`: every reply validated)."""
