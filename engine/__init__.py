"""The host side of code mode: tools, declarations, the replay loop and the session log."""
