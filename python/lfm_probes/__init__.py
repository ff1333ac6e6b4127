"""Scripts lfm runs in a target interpreter with `python -c` to learn about it; embedded in the
binary at build time (analyzer/src/interpreter.rs, packer/src/verify.rs), never imported."""
