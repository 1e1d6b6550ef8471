"""The text-to-SQL adapter's kit: training data, LoRA training, evaluation; imports the run time, never the reverse."""
