"""DeepSpeed config handling: templates, overrides, "auto" resolution, validation, explanation."""
