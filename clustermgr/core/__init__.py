"""The plain building blocks every layer uses: errors, reasons, prices,
hostlists, input checks, one-line log text, secrets, provider kinds, progress marks."""
