"""A command's options type is its schema: `schema.flag` fields (spelling, help, type, choices, aliases),
`parser` derives the argparse arguments from them and reads the namespace back, `values` holds the types that
check a value where it is read (local paths, ports, URLs, numbers, a SGLang release)."""
