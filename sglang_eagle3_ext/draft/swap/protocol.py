"""What the swap's client (client.py) and its handler in the server (../../in_server/draft/swap.py) agree on."""

LOAD_FORMAT = "sglang_eagle3_ext.draft"  # the marker our patch recognises in /update_weights_from_disk
STATE_KEY = "sglang_eagle3_ext_draft"  # what the scheduler adds to /get_server_info's internal states
PROTOCOL = 1
