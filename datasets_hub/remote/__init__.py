"""Published builds: export and push (``publish``, ``format``, ``card``) and opening one by URL, partially resident."""
