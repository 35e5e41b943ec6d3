"""The converters, by family (each module registers its operators)."""
