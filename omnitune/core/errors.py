"""The one exception type for user errors; the CLI turns it into a one-line message."""


class UserError(Exception):
    """Bad input from the user: a file, a field or an option. The message names which."""
