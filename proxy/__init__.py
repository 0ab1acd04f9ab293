"""The grading reverse proxy: relays backend bytes unchanged and grades a copy of them."""
