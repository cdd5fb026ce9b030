"""Stream processing: pure detectors and the Faust agents that wire them to topics."""
