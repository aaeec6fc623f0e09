"""What runs inside SGLang's processes, and nothing else: `hooks/` (one module per SGLang module patched, named by
`patch_table.PATCHES`) and what they start there. It imports the shared library below it; no tool beside SGLang
imports it but `tiny`'s sample dump, which runs the dump's writer on a CPU (`.importlinter`: layers and the
in-server contract)."""
