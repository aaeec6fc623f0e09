"""Does a SGLang release still have every target of the patch table? Found statically in its source
(`source_locate`), checked per release (`release`)."""
