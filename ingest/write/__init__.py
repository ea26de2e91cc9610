"""The writer: prepared batches into rows, one transaction per unit (`writer`), through the only
statements that know the backend (`bulk`); a trial's Hub rows placed as if they came at once
(`settle`); rows that stop being true removed (`removal`). It never parses a file."""
