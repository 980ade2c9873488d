"""The submit pipeline: a spec (and its file, the user config) planned, the code packed, the script rendered."""
