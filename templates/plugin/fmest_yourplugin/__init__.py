"""fmest-yourplugin: the YOURGPU accelerator and yourcloud's prices (an fmest plugin)."""
