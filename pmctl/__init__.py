"""pmctl: the command line of pmm, the process memory monitor."""
