"""What the client (`lfm`) and the call runner (`lfm_runner`) both use, written once: whether a
module is installed (`installed`), values that stay closed where they cannot be opened
(`opaque`). Only the standard library, Python 3.8 and newer: the runner embeds these files in
the lfm binary beside its own (monitor/src/runner) and imports them in the target interpreter;
the wheel installs them beside the client."""
