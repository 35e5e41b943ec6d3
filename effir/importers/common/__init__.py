"""What every importer shares: located errors, values with their types as
they are built, sequences as lists, state cells for keys and statistics,
recurrent layers as loops."""
